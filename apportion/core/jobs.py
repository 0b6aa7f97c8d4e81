"""Jobs as columns: one numpy array a field, one row a job.

``JobTable`` holds what users asked for (immutable specs). What happens to jobs over time
(steps done, attained service, status) lives with whoever runs them (the simulator, the
server), also as arrays over the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from apportion.core.cpu_speed import CoreCurves
from apportion.core.dependencies import Dependencies

if TYPE_CHECKING:
    from apportion.core.elastic import ElasticJobs


@dataclass(frozen=True)
class JobTable:
    job_id: np.ndarray  # [n] str
    submit_time_s: np.ndarray  # [n] float, seconds since the start
    kind: np.ndarray  # [n] int index into ``kinds``
    num_gpus: np.ndarray  # [n] int, GPUs requested (the job's scale)
    total_steps: np.ndarray  # [n] float, steps until done
    priority: np.ndarray  # [n] float weight, 1 by default; larger means a bigger share
    user: np.ndarray  # [n] str, "" if unknown
    queue: np.ndarray  # [n] str, "" if unknown
    kinds: tuple[str, ...]  # the job-kind vocabulary ``kind`` indexes into
    # [n, len(allowed_types)] bool; None means every GPU type is allowed
    allowed: np.ndarray | None = None
    allowed_types: tuple[str, ...] = ()
    deadline_s: np.ndarray | None = None  # [n] absolute time (s since the start) to finish by, NaN if none
    # elastic jobs (GPU count and batch size may change): their columns, ``kinds`` naming the models they
    # train, ``total_steps`` their target in efficiency-weighted examples; None: every job has a fixed size
    elastic: ElasticJobs | None = None
    name: np.ndarray | None = None  # [n] str, the job's name where the workload gives one ("" if not)
    # the jobs (rows of this table) each job must see completed before it starts; None: no job waits for another
    after: Dependencies | None = None
    # what each job needs beside its GPUs, over all of them (0: none); None: no job asks for any
    cpus: np.ndarray | None = None  # [n] float, CPU cores
    memory_gib: np.ndarray | None = None  # [n] float, GiB of host memory
    budget_usd: np.ndarray | None = None  # [n] dollars a job may spend on rented instances, NaN if no limit
    # each job's speed against the CPU cores beside each of its GPUs; None: no job's speed depends on them
    cpu_curves: CoreCurves | None = None
    # [n] float, the steps each job's own estimate of its duration comes to (a user's guess, a time limit,
    # an external estimator's output), NaN where it has none; None: no job has one
    estimated_steps: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.job_id)
        for name in ("submit_time_s", "kind", "num_gpus", "total_steps", "priority", "user", "queue"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"JobTable column '{name}' has {len(getattr(self, name))} rows, expected {n}")
        for name in ("name", "cpus", "memory_gib", "budget_usd", "estimated_steps"):
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
                raise ValueError(f"JobTable column '{name}' has {len(getattr(self, name))} rows, expected {n}")
        if self.cpu_curves is not None and len(self.cpu_curves) != n:
            raise ValueError(f"JobTable column 'cpu_curves' has {len(self.cpu_curves)} rows, expected {n}")
        if self.after is not None and len(self.after) != n:
            raise ValueError(f"JobTable column 'after' has {len(self.after)} rows, expected {n}")
        if n and np.any(np.diff(self.submit_time_s) < 0):
            raise ValueError("JobTable rows must be sorted by submit_time_s")

    def __len__(self) -> int:
        return len(self.job_id)

    @classmethod
    def build(
        cls,
        *,
        job_id,
        submit_time_s,
        kind_names,
        num_gpus,
        total_steps,
        priority=None,
        user=None,
        queue=None,
        kinds: tuple[str, ...] | None = None,
        deadline_after_submit_s=None,
        elastic: ElasticJobs | None = None,
        name=None,
        after: Dependencies | None = None,
        cpus=None,
        memory_gib=None,
        budget_usd=None,
        cpu_curves: CoreCurves | None = None,
        estimated_steps=None,
    ) -> JobTable:
        """Build from plain sequences, sorting by submit time (stable) and indexing kinds; ``after``
        names jobs by their position in these sequences."""
        submit = np.asarray(submit_time_s, dtype=np.float64)
        order = np.argsort(submit, kind="stable")
        names = np.asarray(kind_names, dtype=object)
        vocabulary = tuple(kinds) if kinds is not None else tuple(sorted(set(names.tolist())))
        index = {k: i for i, k in enumerate(vocabulary)}
        kind = np.fromiter((index[k] for k in names), dtype=np.int64, count=len(names))
        n = len(submit)

        def col(values, default, dtype):
            return np.full(n, default, dtype=dtype) if values is None else np.asarray(values, dtype=dtype)

        return cls(
            job_id=np.asarray(job_id, dtype=object)[order],
            submit_time_s=submit[order],
            kind=kind[order],
            num_gpus=np.asarray(num_gpus, dtype=np.int64)[order],
            total_steps=np.asarray(total_steps, dtype=np.float64)[order],
            priority=col(priority, 1.0, np.float64)[order],
            user=col(user, "", object)[order],
            queue=col(queue, "", object)[order],
            kinds=vocabulary,
            deadline_s=None
            if deadline_after_submit_s is None or np.all(np.isnan(deadline_after_submit_s))
            else (submit + np.asarray(deadline_after_submit_s, dtype=np.float64))[order],
            elastic=None if elastic is None else elastic.take(order),
            name=None if name is None else np.asarray(name, dtype=object)[order],
            after=None if after is None else after.take(order),
            cpus=None if cpus is None else np.asarray(cpus, dtype=np.float64)[order],
            memory_gib=None if memory_gib is None else np.asarray(memory_gib, dtype=np.float64)[order],
            budget_usd=None if budget_usd is None or np.all(np.isnan(np.asarray(budget_usd, dtype=np.float64)))
            else np.asarray(budget_usd, dtype=np.float64)[order],
            cpu_curves=None if cpu_curves is None else cpu_curves.take(order),
            estimated_steps=None if estimated_steps is None
            or np.all(np.isnan(np.asarray(estimated_steps, dtype=np.float64)))
            else np.asarray(estimated_steps, dtype=np.float64)[order],
        )

    def take(self, rows: np.ndarray | slice) -> JobTable:
        """The jobs at ``rows`` (kept in submit order); a dependency on a job left out is dropped."""
        def pick(a):
            return None if a is None else a[rows]

        return JobTable(
            job_id=self.job_id[rows],
            submit_time_s=self.submit_time_s[rows],
            kind=self.kind[rows],
            num_gpus=self.num_gpus[rows],
            total_steps=self.total_steps[rows],
            priority=self.priority[rows],
            user=self.user[rows],
            queue=self.queue[rows],
            kinds=self.kinds,
            allowed=pick(self.allowed),
            allowed_types=self.allowed_types,
            deadline_s=pick(self.deadline_s),
            elastic=None if self.elastic is None else self.elastic.take(rows),
            name=pick(self.name),
            after=None if self.after is None else self.after.take(np.arange(len(self))[rows]),
            cpus=pick(self.cpus),
            memory_gib=pick(self.memory_gib),
            budget_usd=pick(self.budget_usd),
            cpu_curves=None if self.cpu_curves is None else self.cpu_curves.take(rows),
            estimated_steps=pick(self.estimated_steps),
        )
