"""Each job's speed against the CPU cores it is given, learnt from its own progress reports.

Between two progress reports of one attempt held to the same share of cores all along, the steps
it made over the seconds between them are its speed at that share (cores per GPU). The steps and
seconds add up per (job, share) in the state file, so a restarted server keeps what it learnt.
A share counts as measured once it has ``enough_s`` seconds behind it.
"""

from __future__ import annotations

import numpy as np

from apportion.serve.store.state import StateStore


def share_key(cores_per_gpu: float) -> float:
    """The share a measurement is filed under (shares a rounding apart are the same share)."""
    return round(float(cores_per_gpu), 3)


class CoreSpeeds:
    """Steps and seconds of each job at each share of cores it ran with, and the share it holds now."""

    def __init__(self, store: StateStore, enough_s: float) -> None:
        self.store = store
        self.enough_s = enough_s
        self.measured: dict[int, dict[float, list[float]]] = {}  # job -> share -> [steps, seconds]
        for job_id, share, steps, seconds in store.core_speeds():
            self.measured.setdefault(int(job_id), {})[float(share)] = [float(steps), float(seconds)]
        self._held: dict[int, tuple[float, float]] = {}  # job -> (share it holds, since when)
        self._last: dict[int, tuple[int, int, float]] = {}  # job -> (attempt, steps done, time) of its last report

    def held(self, job_id: int, cores_per_gpu: float, now: float) -> None:
        """Job ``job_id`` holds ``cores_per_gpu`` from ``now`` (nothing changes if it held that already)."""
        key = share_key(cores_per_gpu)
        if self._held.get(job_id, (None,))[0] != key:
            self._held[job_id] = (key, now)

    def share_held(self, job_id: int) -> float | None:
        """The share (cores per GPU) job ``job_id`` is held to now; None: none."""
        held = self._held.get(job_id)
        return None if held is None else held[0]

    def released(self, job_id: int) -> None:
        """Job ``job_id`` holds no cores (its attempt ended): its next report starts a new interval."""
        self._held.pop(job_id, None)
        self._last.pop(job_id, None)

    def heard(self, job_id: int, attempt: int, steps_done: int, now: float) -> None:
        """A progress report: the interval since the last one counts at the share held all along it."""
        last = self._last.get(job_id)
        self._last[job_id] = (attempt, int(steps_done), now)
        held = self._held.get(job_id)
        if last is None or held is None or last[0] != attempt or last[2] < held[1] or steps_done < last[1]:
            return
        seconds = now - last[2]
        if seconds <= 0:
            return
        totals = self.measured.setdefault(job_id, {}).setdefault(held[0], [0.0, 0.0])
        totals[0] += steps_done - last[1]
        totals[1] += seconds
        self.store.put_core_speed(job_id, held[0], totals[0], totals[1], now)

    def is_measured(self, job_id: int, cores_per_gpu: float) -> bool:
        return self.measured.get(job_id, {}).get(share_key(cores_per_gpu), (0.0, 0.0))[1] >= self.enough_s

    def curve(self, job_id: int) -> tuple[np.ndarray, np.ndarray]:
        """([K] shares measured long enough, ascending; [K] steps/s at each)."""
        shares = sorted(s for s, (_, seconds) in self.measured.get(job_id, {}).items() if seconds >= self.enough_s)
        totals = self.measured.get(job_id, {})
        return (np.array(shares, dtype=np.float64),
                np.array([totals[s][0] / totals[s][1] for s in shares], dtype=np.float64))
