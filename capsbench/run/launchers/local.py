"""The default launcher: every unit in this process, one after another; a unit's events reach the driver at once."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from capsbench.errors import CapsbenchError
from capsbench.models.failures import user_code
from capsbench.run import execute as execution  # execution.execute, looked up per call (tests replace it)
from capsbench.run.execute import Sink
from capsbench.run.units import UnitResult, UnitSpec, failed

log = logging.getLogger(__name__)


class LocalLauncher:
    def run(self, units: list[UnitSpec], on_event: Sink) -> Iterator[UnitResult]:
        for unit in units:
            try:
                with user_code():  # a model's sys.exit() fails its unit; it never ends the run
                    result = execution.execute(unit, on_event)
            except CapsbenchError:  # bad input or environment (a full disk): every unit would fail the same way
                raise
            except Exception as exc:  # noqa: BLE001 -- one unit's crash is recorded; the other units still run
                log.exception("unit %s failed", unit.name)
                result = failed(unit, exc)
            yield result
