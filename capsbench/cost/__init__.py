"""Cost measurement: parameter and MAC counts, peak memory, latency, per-routing-iteration latency."""
