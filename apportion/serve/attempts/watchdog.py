"""Hung attempts and time limits: the checks each tick makes of the live attempts.

An attempt that has neither called for its lease nor reported progress for its job's
``hung_after_s`` (the job file's, else the server's ``--hung-after-s``) is hung: a stopped
process (``kill -STOP``), a deadlock, a collective waiting on a dead peer. Its lease would
otherwise be renewed round after round while it holds its slots doing nothing. It gets
SIGTERM now and SIGKILL ``grace_s`` later (the lifecycle's escalation), and is retried from
its checkpoint as a crash is (lifecycle.py), counting against ``--max-retries``.

A job whose running time over all its attempts reaches its ``time_limit`` gets SIGTERM and
then SIGKILL the same way, and fails with the limit named (Slurm's ``--time``).

One query a tick finds the few attempts that crossed a limit (StateStore.overdue_attempts);
the silence of an attempt adopted by a restarted server is counted from that server's start.
"""

from __future__ import annotations

from apportion.serve.attempts.context import SchedulerState
from apportion.serve.jobs.records import JobRecord


class Watchdog:
    """Stops the attempts that hang or run past their job's time limit."""

    def __init__(self, state: SchedulerState) -> None:
        self.state = state
        self.store, self.executor, self.config, self.log = state.store, state.executor, state.config, state.log
        self.since = state.clock()  # silence before this server started is not the job's

    def check(self, now: float) -> None:
        """SIGTERM each live attempt that hung or ran past its time limit, and say why."""
        for job_id in self.store.overdue_attempts(now, self.since, self.config.hung_after_s):
            row = self.store.job(job_id)
            if row is None or not row.attempt_live or row.stop is not None:
                continue
            limit = row.spec.get("time_limit")
            if limit is not None and ran_s(row, now) >= limit:
                self._stop(row, now, "time_limit", f"time limit {limit:g} s reached", "time-limit",
                           f"attempt {row.attempt}: ran {ran_s(row, now):.0f} s of its {limit:g} s")
            else:
                silent = now - max(row.heard_at or 0.0, row.attempt_started or 0.0, self.since)
                self._stop(row, now, "hung", f"hung: {silence(row, self.config)}", "hung",
                           f"attempt {row.attempt}: silent for {silent:.0f} s", hangs=row.hangs + 1)

    def _stop(self, row: JobRecord, now: float, stop: str, why: str, event: str, detail: str, **fields) -> None:
        with self.store.transaction():
            self.store.update_job(row.id, stop=stop, stop_at=now, term_at=now, reason=f"{why}: SIGTERM sent",
                                  **fields)
            self.store.add_event(now, row.id, event, detail)
        self.executor.terminate(row.id)
        self.log(f"job {row.id}: {why} ({detail}); SIGTERM sent, SIGKILL in {self.config.grace_s:g} s")


def hung_after_s(row: JobRecord, config) -> float | None:
    """The silence after which the job's attempt is hung: its file's ``hung_after_s``, else the server's."""
    own = row.spec.get("hung_after_s")
    return own if own is not None else config.hung_after_s


def silence(row: JobRecord, config) -> str:
    """Why a hung attempt was stopped, in words."""
    return f"no lease call or progress report for {hung_after_s(row, config):g} s"


def ran_s(row: JobRecord, now: float) -> float:
    """Seconds the job's attempts have held slots, the live one's up to ``now``."""
    live = max(0.0, now - row.accounted_at) if row.attempt_live and row.accounted_at is not None else 0.0
    return row.run_s + live
