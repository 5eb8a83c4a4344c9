"""The time left of work priced before it ran, learning from the run. The price says how fast the work should go (a
speed: work per second); the run shows how fast it goes on this machine, under its load. The speed used is the
posterior mean of a gamma prior centred on the priced speed and worth `trust` seconds of watching, updated by the work
done in the time elapsed (the gamma-Poisson model of work arriving at an unknown speed):

    speed = (trust x priced speed + work done) / (trust + seconds elapsed)

It starts at the price and converges to the speed seen, with the weight of what was seen growing with the time watched.
A blend weighted by the share of work done would not: it trusts the price until half the work is done even when a run
slowed by load has shown so for many minutes, and a lump of work credited early (a cancelled pass, a cached step) would
buy the rate seen more weight at once. The time left is never zero while work remains, and grows while nothing is
credited for longer than the speed expects."""

from __future__ import annotations

from dataclasses import dataclass

TRUST_SECONDS = 300.0  # a price counts as this much watching: a few of a training's epochs or an attack's minutes
TRUST_SHARE = 0.5  # and at most this share of its own seconds (a short run learns from its first seconds)


@dataclass(frozen=True)
class Pace:
    """A price for some work: the work per second it expects (`rate`), worth `trust` seconds of watching."""

    rate: float
    trust: float

    @classmethod
    def priced(cls, work: float, seconds: float) -> Pace:
        """The pace of `work` priced at `seconds`, trusted for TRUST_SECONDS or TRUST_SHARE of them, the fewer."""
        seconds = max(seconds, 1e-9)
        return cls(work / seconds, min(TRUST_SECONDS, TRUST_SHARE * seconds))

    def speed(self, done: float, elapsed: float) -> float:
        """Work per second: the price's, blended with `done` work in `elapsed` seconds as described above."""
        return (self.trust * self.rate + done) / (self.trust + elapsed)

    def left(self, done: float, total: float, elapsed: float) -> float:
        """Seconds until `total` at the blended speed."""
        return max(0.0, total - done) / self.speed(done, elapsed)
