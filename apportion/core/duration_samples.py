"""Each group's recent finished jobs' GPU time, kept as a sample, and the Gittins index over it.

The predictor's lognormal (apportion.core.durations) sums a group up in a median and a spread;
on a heavy-tailed history (Philly's: most jobs minutes, a few days) a spread from the quartiles
says the group is narrower than it is, and the index of the lognormal ranks by a wrong median
left. The index over the group's own jobs (as Tiresias ranks, with no shape assumed) says what
the history says: how likely a job that did so much is to end soon, and at what cost.

``DurationSamples`` is told each job as it finishes, by the same group ids as the predictor
(``DurationPredictor.groups``), and keeps each group's last ``window`` GPU times: so a job is
ranked only by jobs that finished before it is ranked. A job is ranked by its most specific group
with at least ``least`` such jobs (none: by the lognormal). A group's index, one value per count
of what a job did (``apportion.core.gittins.sample_keys``), is worked out again when it is next
asked about after its sample changed by ``REFRESH`` of itself (``REFRESH_LEAST`` jobs at least),
not at every finish.
"""

from __future__ import annotations

import numpy as np

from apportion.core.gittins import SAMPLE_COLUMNS, sample_column, sample_keys

WINDOW = 500  # the most recent finished jobs a group keeps
LEAST = 20  # a group ranks its jobs by its sample from this many on
REFRESH = 0.05  # its index is worked out again once this share of its sample is new ...
REFRESH_LEAST = 2  # ... and at least this many jobs


class DurationSamples:
    """Per group id, the GPU-seconds of its most recent finished jobs, and their index table."""

    def __init__(self, *, window: int = WINDOW, least: int = LEAST) -> None:
        if window < 1 or least < 1:
            raise ValueError("window and least must be >= 1")
        self.window, self.least = int(window), int(least)
        self._values: dict[int, tuple[np.ndarray, int]] = {}  # per id: its buffer of GPU-s, and how much is used
        self._seen = np.zeros(1, dtype=np.int64)  # per id (the last entry: id -1, no group): jobs told
        self._worked_at = np.zeros(1, dtype=np.int64)  # jobs told when its row of ``_keys`` was worked out
        self._row = np.full(1, -1, dtype=np.int64)  # per id: its row of ``_keys`` (-1: none yet)
        self._keys = np.full((0, SAMPLE_COLUMNS), np.nan)  # per group ever asked about: 1 / its index at each column
        self._rows = 0

    def observe(self, groups: np.ndarray, gpu_s: np.ndarray) -> None:
        """Finished jobs, oldest first: their group ids ([n, levels], -1: none) and GPU-seconds."""
        groups = np.asarray(groups, dtype=np.int64).reshape(len(gpu_s), -1)
        gpu_s = np.asarray(gpu_s, dtype=np.float64)
        known = np.isfinite(gpu_s)
        groups, gpu_s = groups[known], gpu_s[known]
        if not len(gpu_s):
            return
        self._grow(int(groups.max()) + 1)
        ids = groups.ravel()
        if len(gpu_s) == 1:  # one job (the usual finish): each of its groups gains it
            ids = ids[ids >= 0]  # a job has one group a level: no id twice
            for gid in ids.tolist():
                self._append(gid, gpu_s)
            self._seen[ids] += 1
            return
        # each (group, value) pair by group, stably (a group's values stay in the order told); -1 left out
        order = np.argsort(ids, kind="stable")
        ids, values = ids[order], gpu_s[order // groups.shape[1]]
        first = int(np.searchsorted(ids, 0))
        ids, values = ids[first:], values[first:]
        if not len(ids):
            return
        starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
        ends = np.append(starts[1:], len(ids))
        for gid, start, end in zip(ids[starts].tolist(), starts.tolist(), ends.tolist()):
            self._append(gid, values[start:end])
        self._seen[ids[starts]] += ends - starts

    def _append(self, gid: int, values: np.ndarray) -> None:
        """Group ``gid``'s newest ``values`` at the end of its buffer (up to twice ``window`` long: when
        full, its last ``window`` move to the front, so a buffer is copied once every ``window`` jobs)."""
        buffer, used = self._values.get(gid, (None, 0))
        need = used + len(values)
        if buffer is None or need > len(buffer):
            if need > 2 * self.window:  # keep the last ``window`` and these
                if buffer is not None:
                    values = np.concatenate([buffer[:used], values])
                buffer, used, values = np.empty(2 * self.window), 0, values[-self.window:]
                need = len(values)
            else:
                grown = np.empty(min(max(2 * need, 16), 2 * self.window))
                if buffer is not None:
                    grown[:used] = buffer[:used]
                buffer = grown
        buffer[used:need] = values
        self._values[gid] = (buffer, need)

    def sample(self, gid: int) -> np.ndarray:
        """The sorted GPU-seconds of group ``gid``'s most recent finished jobs (at most ``window``)."""
        buffer, used = self._values.get(gid, (np.zeros(0), 0))
        return np.sort(buffer[max(used - self.window, 0):used])

    def choose(self, groups: np.ndarray) -> np.ndarray:
        """[n] the group each job is ranked by: its most specific (first) with ``least`` jobs; -1: none."""
        groups = np.asarray(groups, dtype=np.int64)
        if not groups.size:
            return np.full(len(groups), -1, dtype=np.int64)
        self._grow(int(groups.max()) + 1)
        enough = self._seen[groups] >= self.least  # -1 reads the sentinel: never
        first = np.argmax(enough, axis=1)
        return np.where(enough.any(axis=1), groups[np.arange(len(groups)), first], -1)

    def keys(self, group: np.ndarray, done_gpu_s: np.ndarray) -> np.ndarray:
        """[n] 1 / the Gittins index (GPU-seconds) of jobs ranked by ``group``'s sample that did
        ``done_gpu_s``, counted at quarter doublings of a GPU-second; NaN where ``group`` is -1."""
        group = np.asarray(group, dtype=np.int64)
        used = np.unique(group[group >= 0])
        if len(used):
            self._grow(int(used.max()) + 1)
            kept = np.minimum(self._seen[used], self.window)
            stale = used[(self._seen[used] - self._worked_at[used]) >= np.maximum(REFRESH_LEAST, REFRESH * kept)]
            for gid in stale.tolist():
                if self._row[gid] < 0:
                    self._row[gid] = self._new_row()
                self._keys[self._row[gid]] = sample_keys(self.sample(gid))
                self._worked_at[gid] = self._seen[gid]
        rows = self._row[group]
        out = self._keys[rows, sample_column(done_gpu_s)] if len(self._keys) else np.full(len(group), np.nan)
        return np.where(rows >= 0, out, np.nan)

    def _new_row(self) -> int:
        """A row of ``_keys`` for a group asked about for the first time."""
        if self._rows == len(self._keys):
            self._keys = np.vstack([self._keys, np.full((max(self._rows, 16), SAMPLE_COLUMNS), np.nan)])
        self._rows += 1
        return self._rows - 1

    def _grow(self, ids: int) -> None:
        """Room for group ids below ``ids`` (and the sentinel at the end)."""
        if ids + 1 <= len(self._seen):
            return
        more = max(ids + 1 - len(self._seen), len(self._seen))
        self._seen = np.concatenate([self._seen[:-1], np.zeros(more + 1, dtype=np.int64)])
        self._worked_at = np.concatenate([self._worked_at[:-1], np.zeros(more + 1, dtype=np.int64)])
        self._row = np.concatenate([self._row[:-1], np.full(more + 1, -1, dtype=np.int64)])
