"""Why a job can never run on a cluster: one sentence per unschedulable job, for jobs.csv and the summary.

A job is unschedulable when no cluster GPU type both runs its kind (a positive throughput,
and a type the job allows) and has at least its GPU count, when no such type's nodes have room
for the CPU cores or memory it asks beside its GPUs (``core/node_resources.py``), or when the
policy's ``never_runs`` says so (today: a queue that may not borrow and whose quota is smaller).
Most jobs are schedulable; sentences are built once per distinct case, not once per job.
"""

from __future__ import annotations

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.jobs import JobTable
from apportion.core.node_resources import NODE_AMOUNT, UNITS, fits_on_nodes, gpus_with_room

_NO_TYPE_ALLOWED, _NO_TYPE_RUNS, _TOO_LARGE, _NEVER_RUNS, _NO_ROOM = 1, 2, 3, 4, 5


def unschedulable_reasons(jobs: JobTable, cluster: Cluster, rates: np.ndarray, never_run: np.ndarray) -> np.ndarray:
    """[n] object array: why each job can never run, "" for the jobs that can.

    ``rates`` is the [n, T] steps/s of each job on each cluster type at its own GPU count, 0
    where it cannot run or is not allowed (before the check that the type has enough GPUs);
    ``never_run`` is the [n] mask of jobs the policy says it can never run.
    """
    n = len(jobs)
    reasons = np.full(n, "", dtype=object)
    runs = np.asarray(rates) > 0
    capacity = np.asarray(cluster.capacity)
    fits = runs & (jobs.num_gpus[:, None] <= capacity[None, :])
    allowed = _allowed_on_cluster(jobs, cluster)

    code = np.zeros(n, dtype=np.int64)
    never_run = np.asarray(never_run, dtype=bool)
    code[never_run] = _NEVER_RUNS
    code[~(fits & fits_on_nodes(cluster, jobs.num_gpus, jobs.cpus, jobs.memory_gib)).any(axis=1)] = _NO_ROOM
    code[~fits.any(axis=1)] = _TOO_LARGE
    code[~runs.any(axis=1)] = _NO_TYPE_RUNS
    code[~allowed.any(axis=1)] = _NO_TYPE_ALLOWED
    rows = np.flatnonzero(code)
    if len(rows) == 0:
        return reasons

    _, queue_code = np.unique(jobs.queue[rows].astype(str), return_inverse=True)
    asked = [column[rows] for column in (jobs.cpus, jobs.memory_gib) if column is not None]
    first, inverse = _cases([code[rows], jobs.kind[rows], jobs.num_gpus[rows], queue_code.reshape(-1),
                             *runs[rows].T, *allowed[rows].T, *asked])
    sentences = np.array([_sentence(jobs, cluster, runs, allowed, int(rows[i]), int(code[rows[i]])) for i in first],
                         dtype=object)
    reasons[rows] = sentences[inverse.reshape(-1)]
    return reasons


def _cases(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows that agree in every column form one case: the first row of each case, and each row's case."""
    key, bound = np.zeros(len(columns[0]), dtype=np.int64), 1
    for column in columns:
        values, column = np.unique(column, return_inverse=True)
        if bound * len(values) >= 2**62:  # renumber the cases so far before the key could overflow
            _, key = np.unique(key, return_inverse=True)
            key, bound = key.reshape(-1).astype(np.int64), int(key.max()) + 1
        key, bound = key * len(values) + column.reshape(-1), bound * len(values)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _allowed_on_cluster(jobs: JobTable, cluster: Cluster) -> np.ndarray:
    """[n, T] whether each job may use each cluster type (a type it does not list is not allowed)."""
    n, types = len(jobs), cluster.gpu_types
    if jobs.allowed is None:
        return np.ones((n, len(types)), dtype=bool)
    out = np.zeros((n, len(types)), dtype=bool)
    for col, gpu_type in enumerate(types):
        if gpu_type in jobs.allowed_types:
            out[:, col] = jobs.allowed[:, jobs.allowed_types.index(gpu_type)]
    return out


def _sentence(jobs: JobTable, cluster: Cluster, runs: np.ndarray, allowed: np.ndarray, row: int, code: int) -> str:
    """The reason for one representative job of a case."""
    kind, gpus = jobs.kinds[jobs.kind[row]], int(jobs.num_gpus[row])
    restricted = not allowed[row].all()
    if code == _NO_TYPE_ALLOWED:
        listed = [t for t, ok in zip(jobs.allowed_types, jobs.allowed[row]) if ok] if jobs.allowed is not None else []
        return f"it may run only on {', '.join(listed) or 'no GPU type'}, and the cluster has none of them"
    if code == _NO_TYPE_RUNS:
        among = f" among the types it may use ({', '.join(_names(cluster, allowed[row]))})" if restricted else ""
        return f"no GPU type in the cluster runs {kind}{among}"
    if code == _TOO_LARGE:
        usable = np.flatnonzero(runs[row])
        largest = int(usable[np.argmax(cluster.capacity[usable])])
        which = "allowed type" if restricted else "type"
        return (f"needs {gpus} GPUs; the largest {which} that runs {kind} has "
                f"{int(cluster.capacity[largest])} ({cluster.gpu_types[largest]})")
    if code == _NO_ROOM:
        return _no_room(jobs, cluster, runs[row] & (gpus <= cluster.capacity), row)
    return f"queue '{jobs.queue[row]}' may not borrow and its quota is smaller than {gpus} GPUs on every type that runs {kind}"


def _no_room(jobs: JobTable, cluster: Cluster, fits: np.ndarray, row: int) -> str:
    """Which of its cores and memory no node of a type that runs the job has room for, and the most they have."""
    kind, gpus = jobs.kinds[jobs.kind[row]], jobs.num_gpus[row : row + 1]
    asked = {"cpus": jobs.cpus, "memory_gib": jobs.memory_gib}
    parts = []
    for name, column in asked.items():
        given = None if column is None else gpus_with_room(cluster, gpus, **{name: column[row : row + 1]})
        if given is None or given[0, fits].max() >= gpus[0]:
            continue  # this one alone leaves room: not the reason
        amount, most = float(column[row]), int(given[0, fits].max())
        if gpus[0] == 1:
            node_amount = getattr(cluster, NODE_AMOUNT[name])
            usable = fits[cluster.node_type]
            best = int(np.flatnonzero(usable)[np.argmax(node_amount[usable])])
            parts.append(f"needs {amount:g} {UNITS[name]}; the most a node of a type that runs {kind} has is "
                         f"{node_amount[best]:g} ({cluster.gpu_types[cluster.node_type[best]]})")
        else:
            parts.append(f"needs {amount:g} {UNITS[name]} with its {gpus[0]} GPUs, {amount / gpus[0]:g} beside each; "
                         f"the nodes of the types that run {kind} have room for that beside {most} of their GPUs at most")
    if not parts:  # each alone would fit; the two together do not
        with_gpus = "its GPU" if gpus[0] == 1 else f"its {gpus[0]} GPUs"
        return (f"needs {float(jobs.cpus[row]):g} {UNITS['cpus']} and {float(jobs.memory_gib[row]):g} "
                f"{UNITS['memory_gib']} with {with_gpus}; no node of a type that runs {kind} has room for both")
    return "; and it ".join(parts)


def _names(cluster: Cluster, mask: np.ndarray) -> list[str]:
    return [t for t, ok in zip(cluster.gpu_types, mask) if ok]
