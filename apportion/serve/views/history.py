"""What the dashboard draws over time: busy slots of each type and jobs waiting and running
(sampled every few seconds), and each job's progress reports since this server started.
Bounded: a series that reaches its limit drops every other point (it keeps the whole span at
half the resolution), and only the most recent jobs' reports are kept. Given the state file,
the samples are kept there too (one small transaction a sample, the same points dropped), so a
restarted server's charts go back before its start; where no server ran, the lines break.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Sequence

from apportion.serve.base.space import NoSpace

if TYPE_CHECKING:
    from apportion.serve.store.state import StateStore

GAP = 5.0  # samples this many times further apart than those around them: no server ran between them


class History:
    """Samples of the cluster and progress reports of jobs; safe to use from several threads."""

    def __init__(self, keep: int = 2000, job_points: int = 500, jobs_kept: int = 500,
                 store: StateStore | None = None) -> None:
        """``store``: the state file to keep the samples in, and to load those of earlier servers from."""
        self.keep = keep
        self.job_points = job_points
        self.jobs_kept = jobs_kept
        self.store = store
        self._lock = threading.Lock()
        self._samples: list[tuple[float, int, int, dict[str, int]]] = []  # time, queued, running, busy by type
        self._reports: OrderedDict[int, list[tuple[float, int, float | None]]] = OrderedDict()
        if store is not None:
            self._samples = store.samples()
            while len(self._samples) > keep:  # kept with a larger limit
                self._samples = _halved(self._samples)

    def sample(self, now: float, queued: int, running: int, busy: dict[str, int]) -> None:
        """One sample of the cluster: jobs waiting and running, busy slots of each type. A state
        directory out of space leaves the sample in memory only."""
        point = (now, int(queued), int(running), {t: int(n) for t, n in busy.items()})
        kept = None
        with self._lock:
            self._samples.append(point)
            if len(self._samples) > self.keep:
                self._samples = _halved(self._samples)
                kept = [s[0] for s in self._samples]
        if self.store is not None:
            try:
                self.store.put_sample(*point, keep=kept)
            except NoSpace:
                pass

    def report(self, job_id: int, now: float, steps_done: int, steps_per_s: float | None) -> None:
        """A progress report of job ``job_id``: its steps done and the rate it measured, if any."""
        with self._lock:
            points = self._reports.get(job_id)
            if points is None:
                points = self._reports[job_id] = []
                while len(self._reports) > self.jobs_kept:
                    self._reports.popitem(last=False)
            points.append((now, int(steps_done), steps_per_s))
            if len(points) > self.job_points:
                self._reports[job_id] = _halved(points)

    def cluster(self, gpu_types: Sequence[str], points: int = 600) -> dict:
        """The samples as columns (at most ``points``, evenly thinned): ``t``, ``queued``,
        ``running`` and ``busy`` (a column for each of ``gpu_types``); where no server ran (see
        ``_with_gaps``) a point of None values, halfway, breaks the lines."""
        with self._lock:
            samples = list(self._samples)
        samples = _with_gaps(_thinned(samples, points))
        return {
            "t": [s[0] for s in samples],
            "queued": [s[1] for s in samples],
            "running": [s[2] for s in samples],
            "busy": {t: [None if s[3] is None else s[3].get(t, 0) for s in samples] for t in gpu_types},
        }

    def job(self, job_id: int) -> dict:
        """Job ``job_id``'s reports as columns ``t``, ``steps_done`` and ``steps_per_s``: the rate
        the job reported, or else the one its steps since the report before give (None where
        neither is known, or its steps went back: it resumed from an older checkpoint)."""
        with self._lock:
            points = list(self._reports.get(job_id, ()))
        rates: list[float | None] = []
        for i, (t, steps, rate) in enumerate(points):
            if rate is None and i > 0:
                t0, steps0, _ = points[i - 1]
                rate = (steps - steps0) / (t - t0) if t > t0 and steps >= steps0 else None
            rates.append(rate)
        return {"t": [p[0] for p in points], "steps_done": [p[1] for p in points], "steps_per_s": rates}


def _halved(points: list) -> list:
    """Every other point, and always the last."""
    kept = points[::2]
    if kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


def _with_gaps(samples: list) -> list:
    """``samples`` with a point of None values halfway across each gap more than ``GAP`` times
    longer than the intervals either side of it (a series halved, or sampled at another rate by
    another server, changes its interval only by a few times, never abruptly by that much)."""
    steps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    broken = samples[:1]
    for i, after in enumerate(samples[1:]):
        around = steps[max(0, i - 1):i] + steps[i + 1:i + 2]
        if around and steps[i] > GAP * max(around):
            broken.append(((samples[i][0] + after[0]) / 2, None, None, None))
        broken.append(after)
    return broken


def _thinned(points: list, most: int) -> list:
    """At most ``most`` points evenly spread over ``points``, the last always kept."""
    if len(points) <= most:
        return points
    step = len(points) / most
    chosen = [points[int(i * step)] for i in range(most - 1)]
    return chosen + [points[-1]]
