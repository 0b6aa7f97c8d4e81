"""Attempts of jobs, one row an attempt, with the times the replay measures overheads from; and the
columns ``apportion history`` counts from (jobs and their attempts, read in one snapshot)."""

from __future__ import annotations

import sqlite3

from apportion.serve.jobs.records import AttemptRecord, record
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (  -- one row an attempt, with the times the replay measures overheads from
    job_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    gpu_type TEXT,
    slots TEXT NOT NULL DEFAULT '',
    partner INTEGER,                    -- the job it shared its slot with when it started; NULL alone
    started REAL NOT NULL,              -- its process started
    first_lease REAL,                   -- its first lease call: start-up done, its first step next
    first_step INTEGER,                 -- steps done at that call (where it resumed)
    lease_told REAL,                    -- the lease end it was last told (renew: true)
    stop_told REAL,                     -- first answered renew: false (it checkpoints and exits)
    stop_step INTEGER,                  -- steps done at that call
    stop_lease_end REAL,                -- the lease end it had been told then: it asked this long ahead
    done REAL,                          -- reported its last step (steps_done = the job's total)
    ended REAL,                         -- its exit was settled
    end_step INTEGER,                   -- steps kept: the resume point, or the total
    how TEXT,                           -- completed, preempted, moved, crashed, failed, cancelled, unplaced
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX IF NOT EXISTS attempts_how ON attempts(how);  -- /metrics counts attempts by how they ended
"""
ATTEMPTS = TableFamily("attempts", SCHEMA)
ACCOUNTING_JOB_COLUMNS = {  # name -> the value an older file that lacks it gets
    "id": 0, "name": "", "user": "", "queue": "", "status": "", "reason": "", "reason_log": "", "exit_code": None,
    "submitted": 0.0, "started": None, "finished": None, "attempt": 0, "preemptions": 0, "retries": 0, "hangs": 0,
}
ACCOUNTING_ATTEMPT_COLUMNS = {"job_id": 0, "attempt": 0, "gpu_type": None, "slots": "", "started": 0.0, "ended": None}


class AttemptTables(StoreConnection):
    """The ``attempts`` table (a part of ``StateStore``)."""

    def attempt_started(self, job_id: int, attempt: int, now: float, gpu_type: str | None, slots: str,
                        partner: int | None) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO attempts (job_id, attempt, gpu_type, slots, partner, started)"
                         " VALUES (?, ?, ?, ?, ?, ?)", (job_id, attempt, gpu_type, slots, partner, now))

    def attempt_first_lease(self, job_id: int, attempt: int, now: float, steps_done: int | None) -> None:
        """The attempt's first lease call (kept if already recorded)."""
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET first_lease = ?, first_step = ? WHERE job_id = ? AND attempt = ?"
                         " AND first_lease IS NULL", (now, steps_done, job_id, attempt))

    def attempt_lease_told(self, job_id: int, attempt: int, lease_end: float) -> None:
        """The attempt was told its lease ends at ``lease_end``."""
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET lease_told = ? WHERE job_id = ? AND attempt = ?",
                         (lease_end, job_id, attempt))

    def attempt_stop_told(self, job_id: int, attempt: int, now: float, steps_done: int | None,
                          lease_end: float | None) -> None:
        """The attempt was first answered renew: false (kept if already recorded); the lease end it had
        been told, else ``lease_end``, is kept with it."""
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET stop_told = ?, stop_step = ?, stop_lease_end = COALESCE(lease_told, ?)"
                         " WHERE job_id = ? AND attempt = ? AND stop_told IS NULL",
                         (now, steps_done, lease_end, job_id, attempt))

    def attempt_done(self, job_id: int, attempt: int, now: float) -> None:
        """The attempt reported its last step (kept if already recorded)."""
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET done = ? WHERE job_id = ? AND attempt = ? AND done IS NULL",
                         (now, job_id, attempt))

    def attempt_ended(self, job_id: int, attempt: int, now: float, end_step: int, how: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE attempts SET ended = ?, end_step = ?, how = ? WHERE job_id = ? AND attempt = ?",
                         (now, end_step, how, job_id, attempt))

    def attempt(self, job_id: int, attempt: int) -> AttemptRecord | None:
        """Attempt ``attempt`` of job ``job_id`` as recorded, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM attempts WHERE job_id = ? AND attempt = ?",
                               (job_id, attempt)).fetchone()
        return record(AttemptRecord, row) if row is not None else None

    def end_step(self, job_id: int, attempt: int) -> int | None:
        """The step attempt ``attempt`` ended at: for one preempted or crashed, where the next resumes."""
        with self._read() as conn:
            row = conn.execute("SELECT end_step FROM attempts WHERE job_id = ? AND attempt = ?",
                               (job_id, attempt)).fetchone()
        return None if row is None else row[0]

    def attempts(self) -> list[AttemptRecord]:
        """Every attempt recorded, by job and attempt number."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM attempts ORDER BY job_id, attempt").fetchall()
        return [record(AttemptRecord, r) for r in rows]

    def attempt_counts(self) -> dict[str, int]:
        """Attempts by how they ended ('' for those not ended), over every run of this state file."""
        with self._read() as conn:
            rows = conn.execute("SELECT COALESCE(how, ''), COUNT(*) FROM attempts GROUP BY how").fetchall()
        return {how: int(n) for how, n in rows}

    def accounting_columns(self) -> tuple[dict[str, tuple], dict[str, tuple]]:
        """What ``apportion history`` counts from, as columns (name -> tuple over rows), read in one
        snapshot through a read connection (a running server's writes and rounds never wait for it):
        every job (``ACCOUNTING_JOB_COLUMNS``, by id) and every attempt (``ACCOUNTING_ATTEMPT_COLUMNS``).
        A column or table a file written by an older apportion lacks comes back filled with its default."""
        with self.snapshot(), self._read() as conn:
            began = not conn.in_transaction  # a read-only store's own connection: one snapshot of both tables
            if began:
                conn.execute("BEGIN")
            try:
                return (_columns(conn, "jobs", ACCOUNTING_JOB_COLUMNS, "id"),
                        _columns(conn, "attempts", ACCOUNTING_ATTEMPT_COLUMNS, "job_id, attempt"))
            finally:
                if began:
                    conn.execute("COMMIT")

def _columns(conn: sqlite3.Connection, table: str, wanted: dict[str, object], order: str) -> dict[str, tuple]:
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if not have:
        return {name: () for name in wanted}
    chosen = ", ".join(name if name in have else "NULL" for name in wanted)
    cursor = conn.execute(f"SELECT {chosen} FROM {table} ORDER BY {order}")
    cursor.row_factory = None
    columns = list(zip(*cursor.fetchall())) or [()] * len(wanted)
    return {name: (column if name in have else (default,) * len(column))
            for (name, default), column in zip(wanted.items(), columns)}
