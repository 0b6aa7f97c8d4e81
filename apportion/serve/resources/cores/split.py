"""Dividing the node's CPU cores among the attempts running on its slots, and holding each to its share.

``--cpu-split off`` (the default) leaves the cores to the OS, as before the server divided them:
no job is pinned or limited. ``proportional`` gives every slot the same share of the node's cores,
as a scheduler that counts GPUs only would: predictable, nothing to measure, and a job's speed
does not change with its neighbours. ``--cpu-split aware`` gives them for the most progress
(Synergy, Mohan et al., OSDI'22: ``mechanism/cpu_split.split_cores``), from each job's speed at
each share of cores, learnt from its progress reports (``core_speeds.py``). A job is profiled
briefly when it first runs (as Synergy does): held in turn to PROFILE_SHARES times its proportional
share, each for ``cpu_profile_s`` of reports; until its profile is done its share is fixed (the
profile's point). The profile stays within the proportional share, so profiles always fit; above
the most it was measured at, a job whose speed still rose by RISING or more is taken to go on
rising as it did, up to twice that share, so that it is given more and measured there (reports
at every share it holds keep adding to its curve). Once profiled, no job goes below the share at
which its curve is as fast as at its proportional share (at most 1 core per GPU), nor below half
its proportional share (FLOOR: speeds measured on a busy machine can make a job whose loader
needs its cores look as if it did not; this bounds what such a misreading costs it), nor below the
``cpus`` it asked for; cores that would speed no job up are shared among the profiled jobs in
proportion to their GPUs rather than left idle. Placement (``rounds.py``) starts a job only where
its ``cpus``, or FLOOR of its proportional share when it asked none, fit beside the running jobs',
so where shares must be cut to fit the node only the part above those is cut.

The split is worked out every half second (EVERY_S), from the attempts running then. A share
becomes concrete cores: the shares are laid one after another along the node's core ids in job
id order, each job pinned to the cores its stretch touches, and limited to its share of their
time where the executor can (a CPU quota). Jobs keep their cores while the split stands.
"""

from __future__ import annotations

import json
import math

import numpy as np

from apportion.core.cpu_speed import CoreCurves, relative_speed, relative_speed_each
from apportion.mechanism.cpu_split import split_cores
from apportion.serve.resources.host import Host
from apportion.workloads.cpu_speed_column import pairs_of_cell
from apportion.serve.resources.cores.speeds import CoreSpeeds, share_key

PROFILE_SHARES = (1.0, 0.5, 0.25)  # a new job's profile, as multiples of its proportional share, in order
RISING = 0.05  # a curve whose last measured step gained this much is taken to rise on beyond it
FLOOR = 0.5  # no job goes below this fraction of its proportional share (unless it asked for less): what a noisy profile may cost it
STEP = 0.05  # cores per GPU the aware split hands out at a time
EVERY_S = 0.5  # how often the running attempts are read and the split worked out again


class CoreSplit:
    """Works out the split each tick it may have changed, and tells the executor what changed."""

    def __init__(self, state: Host) -> None:
        self.state = state
        self.mode = state.config.cpu_split
        self.cpus = state.node.cpus
        self.speeds = CoreSpeeds(state.store, state.config.cpu_profile_s)
        self.held: dict[int, tuple[int, tuple[int, ...], float]] = {}  # job -> (attempt, cores, share) told
        self._given: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # job -> its job file's cpu_speed curve
        self._checked = np.zeros(0, dtype=np.int64)  # the jobs whose spec was read for it (sorted)
        self._next_at = -math.inf

    @property
    def divides(self) -> bool:
        """Whether the node's cores are divided at all (not ``off``, and known here)."""
        return self.mode != "off" and bool(self.cpus)

    def tick(self, now: float) -> None:
        """Every EVERY_S: the running attempts read, the split worked out again and what changed applied
        (a new attempt runs on the cores its wrapper was started with until then)."""
        if not self.divides or now < self._next_at:  # off; no cores known here (a Ray cluster's nodes); or not yet
            return
        self._next_at = now + EVERY_S
        live = tuple(self.state.store.job_columns(("id", "attempt", "slots", "cpus"), "attempt_live AND slots != ''"))
        for job_id in set(self.held) - {row[0] for row in live}:
            del self.held[job_id]
            self.speeds.released(job_id)
        if not live:
            return
        ids = np.array([row[0] for row in live], dtype=np.int64)
        gpus = np.array([len(row[2].split(",")) for row in live], dtype=np.float64)
        asked = np.array([row[3] or 0.0 for row in live], dtype=np.float64)
        share = self.shares(ids, gpus, asked)
        for (job_id, attempt, _, _), cores, amount in zip(live, self.cores_of(share * gpus), share * gpus):
            told = (attempt, cores, round(float(amount), 3))
            if self.held.get(job_id) == told:
                continue
            if self.state.executor.set_cores(job_id, cores, told[2]):
                self.held[job_id] = told
                self.speeds.held(job_id, float(share[ids == job_id][0]), now)

    def shares(self, ids: np.ndarray, gpus: np.ndarray, asked_cpus: np.ndarray) -> np.ndarray:
        """[m] cores per GPU for the running jobs ``ids`` on ``gpus`` [m] slots each, that asked for
        ``asked_cpus`` [m] cores (0: none)."""
        node_cores = float(len(self.cpus))
        even = node_cores / len(self.state.slots)
        asked = asked_cpus / gpus
        kept = np.maximum(asked, FLOOR * even)  # what a cut never takes: its ask, else half its proportional share
        if self.mode != "aware":
            return _fitted(np.maximum(asked, even), kept, gpus, node_cores)
        fixed = np.full(len(ids), np.nan)  # profiling (or no curve yet): this share, whatever the others need
        minimum = np.zeros(len(ids))
        rows: list[tuple[np.ndarray, np.ndarray]] = []
        for j, job_id in enumerate(ids.tolist()):
            profile = [p for p in self._profile(even, gpus[j], node_cores)  # never below what it asked for
                       if p >= asked[j] - 1e-9 and not self.speeds.is_measured(job_id, p)]
            points, speed = self.speeds.curve(job_id)
            if profile or not len(points) or not speed.max() > 0:
                fixed[j] = max(profile[0] if profile else even, asked[j])
                rows.append((np.array([1.0]), np.array([1.0])))
                continue
            rows.append(_hopeful(points, speed))
            minimum[j] = max(asked[j], FLOOR * even, min(1.0, _reaching(points, speed, even)))
        curved = np.isnan(fixed)
        base = np.where(curved, minimum, fixed)
        if float(base @ gpus) > node_cores:  # the minimums and profiles do not fit: cut above what is kept
            return _fitted(base, kept, gpus, node_cores)
        if not curved.any():
            return base
        curves = _common_curves([rows[j] for j in np.flatnonzero(curved)])
        free = node_cores - float(base[~curved] @ gpus[~curved])
        split = split_cores(np.array([free]), np.zeros(int(curved.sum()), dtype=np.int64),
                            np.arange(int(curved.sum())), gpus[curved], curves, base[curved], step=STEP)
        base[curved] = split
        left = node_cores - float(base @ gpus)  # no job goes faster with them: shared in proportion to GPUs
        base[curved] += max(left, 0.0) / float(gpus[curved].sum())
        return base

    def speed_at_share(self, ids: np.ndarray, gpus: np.ndarray, asked_cpus: np.ndarray) -> np.ndarray:
        """[n] the fraction of its best speed each job trains at with the proportional share of the node's
        cores per slot (or the cores it asked, where more): what the round ranks jobs by, as the simulator
        does (``sim/cpu_cores.CoreDivision.speed_at_share``); exact under ``proportional``, under ``aware``
        the least it gets. Read off the job's curve (:meth:`_curves`); 1 where it has none."""
        even = self.even_share
        asked = np.nan_to_num(np.asarray(asked_cpus, dtype=np.float64)) / np.maximum(np.asarray(gpus), 1)
        return self._speed_at(np.asarray(ids, dtype=np.int64), np.maximum(even, asked))

    def report_factor(self, job_id: int) -> float:
        """What a steps/s job ``job_id`` reports now is multiplied by to be its speed at the proportional
        share per slot: its curve's speed there over its speed at the share it holds (1 where it holds
        none, has no curve, or its curve says it cannot train where it does). The speeds a kind measured
        are kept at that share, so that jobs held to other shares (their ``cpus``, a cut to fit, ``aware``)
        add up, and the round takes each job from there to its own."""
        held = self.speeds.share_held(job_id)
        if held is None or not self.divides:
            return 1.0
        ids = np.array([job_id, job_id], dtype=np.int64)
        at_even, at_held = self._speed_at(ids, np.array([self.even_share, held])).tolist()
        return at_even / at_held if at_held > 0 else 1.0

    @property
    def even_share(self) -> float:
        """The node's cores per slot: every slot's share under ``proportional``."""
        return len(self.cpus) / len(self.state.slots)

    def _speed_at(self, ids: np.ndarray, shares: np.ndarray) -> np.ndarray:
        """[n] the fraction of its best speed each job of ``ids`` trains at with ``shares`` [n] cores per GPU
        (every curve read at once, each on its own core counts: one Python step a job, none a curve)."""
        out = np.ones(len(ids))
        curves = self._curves(ids)
        if not curves:
            return out
        rows = np.flatnonzero(np.isin(ids, np.fromiter(curves, dtype=np.int64, count=len(curves))))
        out[rows] = relative_speed_each([curves[job_id] for job_id in ids[rows].tolist()],
                                        np.asarray(shares, dtype=np.float64)[rows])
        return out

    def _curves(self, ids: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{job id: (cores per GPU, speeds)} of the jobs of ``ids`` with a curve: as its job file gives it
        (``cpu_speed``), else as learnt where two or more shares are measured (``speeds.py``). The job file's
        first: a learnt curve is flat above the most cores it was measured at, so it cannot say how much
        faster more would make a job, and under ``proportional`` a job is measured at its own share alone
        (or at shares a cut to fit moved it between, too close to say much)."""
        given = self._given_curves(ids)
        learnt = [job_id for job_id, shares in self.speeds.measured.items() if len(shares) > 1]  # the few with a curve
        found = dict(given)
        for job_id in np.intersect1d(ids, np.array(learnt, dtype=np.int64)).tolist():
            points, speed = self.speeds.curve(job_id)
            if job_id not in given and len(points) >= 2 and speed.max() > 0:
                found[job_id] = (points, speed)
        return found

    def _given_curves(self, ids: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{job id: (cores per GPU, speeds)} of the jobs of ``ids`` whose job file gives ``cpu_speed``; each
        job's stored spec read once (a job's spec never changes), the ones gone forgotten."""
        new = ids[~np.isin(ids, self._checked)]
        if len(self._checked) > 2 * len(ids) + 1000:
            self._checked = self._checked[np.isin(self._checked, ids)]
            self._given = {job_id: self._given[job_id] for job_id in self._checked.tolist() if job_id in self._given}
        if len(new):
            for job_id, text in self.state.store.specs_of(np.unique(new).tolist()).items():
                if (curve := _given_curve(text)) is not None:
                    self._given[job_id] = curve
            self._checked = np.union1d(self._checked, new)
        if not self._given:
            return {}
        return {job_id: self._given[job_id]
                for job_id in np.intersect1d(ids, np.fromiter(self._given, dtype=np.int64)).tolist()}

    def cores_of(self, amounts: np.ndarray) -> list[tuple[int, ...]]:
        """The core ids each job's ``amounts`` [m] (cores, in job id order) is pinned to: the shares laid
        one after another along the node's cores, each job on the cores its stretch touches."""
        ends = np.cumsum(amounts)
        starts = ends - amounts
        n = len(self.cpus)
        out = []
        for start, end in zip(starts.tolist(), ends.tolist()):
            first = min(int(math.floor(start + 1e-9)), n - 1)
            last = max(first + 1, min(int(math.ceil(end - 1e-9)), n))
            out.append(tuple(self.cpus[first:last]))
        return out

    def describe(self) -> dict:
        """The split as ``apportion status`` shows it."""
        return {"split": self.mode, "node_cores": len(self.cpus),
                "held_by": getattr(self.state.executor, "core_enforcement", ""),
                "jobs": {str(job_id): {"cpus": list(cores), "share": share}
                         for job_id, (_, cores, share) in sorted(self.held.items())}}

    def _profile(self, even: float, gpus: float, node_cores: float) -> list[float]:
        """The shares a job is profiled at: multiples of its proportional share, within the node."""
        shares = [share_key(min(even * f, node_cores / gpus)) for f in PROFILE_SHARES]
        return list(dict.fromkeys(shares))


def floor_per_gpu(mode: str, node_cores: int, slots: int) -> float:
    """Cores per GPU a job that asked none is never cut below (FLOOR of its proportional share), where
    the cores are divided at all (else 0): what placement counts for it."""
    return FLOOR * node_cores / slots if mode != "off" and node_cores and slots else 0.0


def _given_curve(spec: str | dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The curve a stored spec's ``cpu_speed`` gives (checked at submit), or None (none, or unreadable)."""
    if isinstance(spec, str):
        if "cpu_speed" not in spec:  # most specs: not parsed at all
            return None
        try:
            spec = json.loads(spec)
        except ValueError:
            return None
    text = spec.get("cpu_speed") if isinstance(spec, dict) else None
    if not isinstance(text, str):
        return None
    try:
        return pairs_of_cell(text, "the stored job")
    except ValueError:
        return None


def _fitted(share: np.ndarray, kept: np.ndarray, gpus: np.ndarray, node_cores: float) -> np.ndarray:
    """``share`` [m] (cores per GPU) where it fits the node's cores; else each job keeps up to its ``kept``
    [m] and the part above it is cut in proportion. Placement sees that the kept parts fit (a job asks
    ``cpus``, or half its proportional share); where they do not (jobs started before), all is cut."""
    need = float(share @ gpus)
    if need <= node_cores:
        return share
    whole = np.minimum(share, kept)
    above = share - whole
    room = node_cores - float(whole @ gpus)
    if room < 0 or not float(above @ gpus) > 0:
        return share * node_cores / need
    return whole + above * room / float(above @ gpus)


def _reaching(points: np.ndarray, speed: np.ndarray, share: float) -> float:
    """The fewest cores per GPU at which a job with this curve is as fast as at ``share``."""
    curves = CoreCurves(points, speed[None, :])
    grid = np.linspace(0.0, share, 201)[1:]
    at = relative_speed(curves, np.zeros(len(grid), dtype=np.int64), grid)
    return float(grid[np.argmax(at >= at[-1] - 1e-9)])


def _hopeful(points: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A curve still rising at its last measured share (by RISING or more) extended along its last
    slope to twice that share; otherwise as it is."""
    if len(points) < 2 or not speed[-1] >= speed[-2] * (1 + RISING):
        return points, speed
    slope = (speed[-1] - speed[-2]) / (points[-1] - points[-2])
    return np.append(points, 2 * points[-1]), np.append(speed, speed[-1] + slope * points[-1])


def _common_curves(rows: list[tuple[np.ndarray, np.ndarray]]) -> CoreCurves:
    """One CoreCurves over the union of the jobs' own points, each job's speed read off its own curve."""
    points = np.unique(np.concatenate([p for p, _ in rows]))
    speed = np.empty((len(rows), len(points)))
    for j, (own, at) in enumerate(rows):
        own_curve = CoreCurves(own, at[None, :])
        speed[j] = relative_speed(own_curve, np.zeros(len(points), dtype=np.int64), points)
    return CoreCurves(points, speed)
