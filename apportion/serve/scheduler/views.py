"""What the server's readers may read of a scheduler: the state file's read queries, attempts' logs, the
accounting columns, users' budgets, the round's counts, the resources' figures, all read-only.

The HTTP edge (``serve/http``) and what operators read (``serve/views``) ask here, never the
scheduler's store, state, executor or parts (``tests/test_layers.py`` holds them to it): one place
says what the outside reads, and the scheduler's insides may change behind it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from apportion.serve.base.offline import job_nodes
from apportion.serve.jobs.records import EventRecord, JobRecord


class SchedulerViews:
    """The read side of one :class:`~apportion.serve.scheduler.scheduler.Scheduler`."""

    def __init__(self, scheduler) -> None:  # the Scheduler that makes it (scheduler.py imports this module)
        self._scheduler = scheduler
        self._store, self._executor, self._state = scheduler.store, scheduler.executor, scheduler.state

    # jobs -------------------------------------------------------------------------------

    def snapshot(self) -> AbstractContextManager[None]:
        """One consistent read of the state file that waits for no round (``StateStore.snapshot``)."""
        return self._store.snapshot()

    def job(self, job_id: int) -> JobRecord | None:
        """Job ``job_id``'s record, None if there is none (``Scheduler.row`` says why)."""
        return self._store.job(job_id)

    def owner(self, job_id: int) -> tuple[str, bool] | None:
        """(whose job or array ``job_id`` is, whether it is an array); None: neither."""
        return self._store.owner(job_id)

    def array_size(self, array_id: int) -> int:
        """How many tasks the array ``array_id`` has (0: it is none)."""
        return self._store.array_size(array_id)

    def job_columns(self, columns: tuple[str, ...], where: str = "", params: list | tuple = (),
                    limit: int | None = None) -> list[tuple]:
        """These columns of the jobs ``where`` picks, by id (``StateStore.job_columns``)."""
        return self._store.job_columns(columns, where, params, limit)

    def specs_of(self, ids: list[int]) -> dict[int, str | dict]:
        """The stored specs of jobs ``ids``, as text (or parsed, where the store keeps them so)."""
        return self._store.specs_of(ids)

    def current_jobs(self, finished: int, waiting: int) -> list[JobRecord]:
        """Every running job, the first ``waiting`` waiting ones and the ``finished`` that ended last."""
        return self._store.current_jobs(finished, waiting)

    def events(self, job_id: int, limit: int) -> list[EventRecord]:
        """Job ``job_id``'s latest ``limit`` events."""
        return self._store.events(job_id, limit=limit)

    def counts(self) -> dict[str, int]:
        """Jobs by status."""
        return self._store.counts()

    def job_totals(self, now: float) -> list[tuple]:
        """Jobs grouped by status, queue and user, with their preemptions and GPU-seconds (``/metrics``)."""
        return self._store.job_totals(now)

    def attempt_counts(self) -> dict[str, int]:
        """Attempts by how they ended (None: still under way)."""
        return self._store.attempt_counts()

    def accounting_columns(self) -> tuple[dict[str, tuple], dict[str, tuple]]:
        """The accounting columns ``usage.usage`` reads, jobs and attempts in one snapshot through the
        store's read connections (never waiting for a round)."""
        return self._store.accounting_columns()

    # attempts and slots -----------------------------------------------------------------

    def log_path(self, job_id: int, attempt: int) -> Path:
        """Where attempt ``attempt`` of job ``job_id`` writes its output."""
        return self._executor.log_path(job_id, attempt)

    def log_tail(self, job_id: int, attempt: int, lines: int) -> str:
        """The last ``lines`` lines of that attempt's output."""
        return self._executor.tail(job_id, attempt, lines)

    def nodes(self, job_id: int, live: bool) -> list[str] | None:
        """Where a live job's ranks run (Ray; ``offline.job_nodes``)."""
        return job_nodes(self._executor, job_id, live)

    def gpu_type_of(self, slot: str) -> str | None:
        """The GPU type of slot ``slot`` (None: no such slot here)."""
        found = self._state.slot_by_id.get(slot)
        return None if found is None else found.gpu_type

    # estimates, users, resources --------------------------------------------------------

    @property
    def durations(self):
        """Finished jobs' durations and the predictions made from them (``estimates/durations.py``)."""
        return self._scheduler.durations

    @property
    def budgets(self):
        """What each user may hold and holds (``accounts/budgets.py``)."""
        return self._scheduler.requests.budgets

    def lease_answers(self) -> dict[str, int]:
        """Lease calls answered this run: renew and stop."""
        return dict(self._scheduler.requests.lease_answers)

    def resource_metrics(self, now: float) -> list:
        """Each optional resource's /metrics lines, read now (inside the caller's snapshot), written later
        (``Resource.read_metrics``)."""
        return [resource.read_metrics(now) for resource in self._state.resources]

    def resource_dashboard(self) -> dict:
        """Each optional resource's part of the dashboard's view (``Resource.dashboard``: the privacy blocks)."""
        return self._state.resources.dashboard()
