"""steps/s of each (job kind, slot type, slots), learned from the jobs' progress reports.

The estimates are what the policies see as throughputs. A kind never measured on a type runs
at ``default_steps_per_s`` there, so policies treat unmeasured types as equally fast.
"""

from __future__ import annotations

from apportion.serve.state import StateStore


class ThroughputEstimates:
    """Smoothed steps/s per (kind, gpu_type, gpus), kept in the state file."""

    def __init__(self, store: StateStore, capacity: dict[str, int], default_steps_per_s: float) -> None:
        self.store = store
        self.capacity = capacity
        self.default_steps_per_s = default_steps_per_s
        self.table = store.throughputs()  # (kind, gpu_type, gpus) -> (steps/s, samples)
        self.version = 0  # bumped when an estimate is new or moves by over 10%: the allocation is stale

    def record(self, kind: str, gpu_type: str, gpus: int, steps_per_s: float, now: float) -> None:
        """Fold one report into the estimate (exponential average, 0.2 to the newest) and store it."""
        key = (kind, gpu_type, gpus)
        old, samples = self.table.get(key, (0.0, 0))
        new = steps_per_s if samples == 0 else 0.8 * old + 0.2 * steps_per_s
        if samples == 0 or abs(new - old) > 0.1 * old:
            self.version += 1
        self.table[key] = (new, samples + 1)
        self.store.put_throughput(*key, new, samples + 1, now)

    def rate(self, kind: str, gpu_type: str, gpus: int, allowed: tuple[str, ...] | None) -> float:
        """steps/s of a job of ``kind`` on ``gpus`` slots of ``gpu_type``: 0 where it cannot run there,
        the latest estimate where measured, else ``default_steps_per_s``."""
        if gpus > self.capacity.get(gpu_type, 0) or (allowed is not None and gpu_type not in allowed):
            return 0.0
        return self.table.get((kind, gpu_type, gpus), (self.default_steps_per_s, 0))[0]
