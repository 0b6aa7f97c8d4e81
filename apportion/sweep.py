"""A grid of replays (policies × clusters × loads × seeds) and each metric's mean over the seeds
with a 95% confidence interval.

Every cell of the grid is one replay (``experiment.run_policy`` on the inputs its load, seed
and cluster give), run in its own process: a pool of local processes by default, or Ray tasks
on a Ray cluster (``ray_address``; every node needs apportion, and the files the inputs name).
What ``apportion sweep`` runs; a Python user calls it the same way::

    cells = grid(["fifo", "las"], rates=[4, 8], seeds=range(5), clusters=["v100:8,k80:8"])
    rows = run_grid(cells, WorkloadSettings(jobs=200))
    table = summarize(rows)
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace

from apportion.experiment import WorkloadSettings, load_inputs, run_policy
from apportion.sim import SimConfig

# the metrics a sweep reports: summary key -> which way is better (-1 lower, +1 higher)
METRICS = {"avg_jct_s": -1, "p99_jct_s": -1, "makespan_s": -1, "avg_queueing_s": -1, "utilization": +1,
           "completed": +1, "preemptions": -1}
# reported only where a replay gives them: the GPU-weighted data stall (jobs whose speed depends on
# their cores) and the privacy claims granted (--blocks)
OPTIONAL_METRICS = {"data_stall": -1, "privacy_granted": +1}
CONFIDENCE = 0.95

# (cells done, cells in all)
GridProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class Cell:
    """One replay of the grid."""

    policy: str
    cluster: str
    rate_per_hour: float
    seed: int


def grid(policies: Sequence[str], rates: Iterable[float], seeds: Iterable[int], clusters: Sequence[str]) -> list[Cell]:
    """Every combination, policies outermost and seeds innermost."""
    seeds, rates = list(seeds), list(rates)
    return [Cell(p, c, float(r), int(s)) for p in policies for c in clusters for r in rates for s in seeds]


def run_cell(cell: Cell, base: WorkloadSettings, config: SimConfig, options: dict) -> dict:
    """One replay: the cell's coordinates and its summary's metrics."""
    inputs = load_inputs(replace(base, rate_per_hour=cell.rate_per_hour, seed=cell.seed, cluster=cell.cluster))
    summary = run_policy(inputs, cell.policy, config, **options).summary
    given = {m: summary[m] for m in OPTIONAL_METRICS if m in summary}
    return {**asdict(cell), **{m: summary.get(m) for m in METRICS}, **given, "sim_wall_s": summary.get("sim_wall_s")}


def metrics_of(rows: Sequence[dict]) -> list[str]:
    """The metrics the rows give: METRICS, then the optional ones some row has."""
    return list(METRICS) + [m for m in OPTIONAL_METRICS if any(m in row for row in rows)]


def run_grid(cells: Sequence[Cell], base: WorkloadSettings, config: SimConfig = SimConfig(), *,
             workers: int = 0, ray_address: str | None = None, progress: GridProgress | None = None,
             **options) -> list[dict]:
    """Run every cell (``options`` as for run_policy); rows in the cells' order.

    Locally: ``workers`` processes (default one a CPU; one means here, one after another).
    With ``ray_address``: one Ray task a cell, one CPU each. A failing cell's error is raised here.
    """
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], len(cells))

    if ray_address is not None:
        return _on_ray(cells, base, config, options, ray_address, tick)
    processes = workers if workers > 0 else min(len(cells), os.cpu_count() or 1)
    if processes <= 1:
        rows = []
        for cell in cells:
            rows.append(run_cell(cell, base, config, options))
            tick()
        return rows
    with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_cell, cell, base, config, options): i for i, cell in enumerate(cells)}
        rows: list[dict | None] = [None] * len(cells)
        try:
            for future in as_completed(futures):
                rows[futures[future]] = future.result()
                tick()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return rows


def _on_ray(cells, base, config, options, address: str, tick) -> list[dict]:
    """One Ray task a cell; this process joins the cluster for the sweep's length only (unless it was already in)."""
    from apportion.executors.ray_connect import join

    joined = not _connected()
    ray = join(address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(run_cell)
        refs = [remote.remote(cell, base, config, options) for cell in cells]
        index = {ref: i for i, ref in enumerate(refs)}
        rows: list[dict | None] = [None] * len(cells)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    rows[index[ref]] = ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    raise err.as_instanceof_cause() from None
                tick()
        return rows
    finally:
        if joined:
            ray.shutdown()


def _connected() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """The mean and the half-width of its two-sided confidence interval (Student's t over the
    seeds); no interval (None) from one value."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    from scipy.stats import t

    spread = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf((1 + confidence) / 2, n - 1) * spread / math.sqrt(n))


def summarize(rows: Sequence[dict], metrics: Iterable[str] = METRICS) -> list[dict]:
    """One row per (policy, cluster, load): each metric's mean over the seeds, its 95% interval's
    half-width and bounds, and how many seeds gave a value (a metric a replay could not give,
    e.g. a JCT with no job completed, is left out of its mean)."""
    metrics = list(metrics)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["policy"], row["cluster"], row["rate_per_hour"]), []).append(row)
    out = []
    for (policy, cluster, rate), members in groups.items():
        entry = {"policy": policy, "cluster": cluster, "rate_per_hour": rate, "seeds": len(members)}
        for metric in metrics:
            values = [float(m[metric]) for m in members if _number(m.get(metric))]
            if not values:
                entry[metric] = {"mean": None, "ci95": None, "low": None, "high": None, "n": 0}
                continue
            mean, half = mean_ci(values)
            entry[metric] = {"mean": mean, "ci95": half, "low": None if half is None else mean - half,
                             "high": None if half is None else mean + half, "n": len(values)}
        out.append(entry)
    return out


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
