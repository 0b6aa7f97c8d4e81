"""The round's rows kept between rounds: every write to a job is counted, so a round reads again
only the jobs stored or changed since the last (``round_table``); what a round writes itself
(``update_jobs``) is patched into the kept rows at commit, not read back."""

from __future__ import annotations

import sqlite3
import threading

import numpy as np

from apportion.serve.jobs.records import job_column_rows
from apportion.serve.store.jobs import ACTIVE, COLUMN_SQL, IS_ACTIVE, JobTables
from apportion.serve.store.round_rows import RoundColumns, RoundRows

_ROUND_NAMES = (
    "id", "status", "reason", "kind", "gpus", "gpu_types", "priority", "total_steps", "steps_done", "submitted",
    "started", "live", "pid", "stop", "slots", "gpu_type", "lease_end", "run_s", "service_gpu_s", "service_by_type",
    "accounted_at", "attempt", "attempt_started", "contact_at", "queue", "user", "partner", "shared_by_type", "move_to",
    "name", "elastic", "batch_size", "batch_log", "after", "array_id", "cpus", "memory_gb", "estimated_duration_s",
)
# the round columns whose values update_jobs can give the kept round rows as SQLite reads them back: not
# status or live (they decide whether a row is kept at all); name -> how SQLite stores a value there
_PATCHABLE = {
    "reason": str, "slots": str, "gpu_type": str, "partner": int, "lease_end": float, "stop": str, "move_to": str,
    "batch_size": int, "run_s": float, "service_gpu_s": float, "service_by_type": str, "shared_by_type": str,
    "accounted_at": float, "steps_done": int, "attempt": int,
}
_ROUND_COLUMNS = ", ".join(COLUMN_SQL.get(name, name) for name in _ROUND_NAMES)
_ROUND_STATUS, _ROUND_LIVE = _ROUND_NAMES.index("status"), _ROUND_NAMES.index("live")


class RoundTable(JobTables):
    """The jobs' writes counted and the round's rows kept (a part of ``StateStore``)."""

    def _start_round_table(self) -> None:
        self._round_rows: RoundRows | None = None  # the round table's rows, kept between rounds
        self._round_read = 0  # the writes the kept round rows have seen (``writes_since``)
        self._round_patched: dict[int, int] = {}  # job id -> its write that the kept round rows were patched with
        self._patches: list[tuple[int, tuple[str, ...], list[tuple]]] = []  # (write, names, rows): to patch at commit
        self._pending_rows: list[tuple[int, tuple]] = []  # (write, round row) of each job stored in this transaction
        self._inserted: dict[int, tuple[int, tuple]] = {}  # job id -> (its write, its round row), stored since read
        self._writes = 0  # writes to jobs so far, in this process
        self._last_write: dict[int, int] = {}  # job id -> the count of writes at its last one
        self._write_log: list[tuple[int, ...]] = []  # the jobs of each write, write ``_log_from + 1`` first
        self._log_from = 0
        self._round_reader: sqlite3.Connection | None = None  # the connection round_table reads through, meanwhile

    def _stored(self, **values) -> None:
        """Job ``values["id"]`` was just stored with these values: one write, and its round row as the
        next round would read it, kept once the transaction commits."""
        self._wrote((values["id"],))
        self._pending_rows.append((self._writes, _inserted_round_row(**values)))

    def _committed(self) -> None:
        self._patch_round_rows()
        for write, row in self._pending_rows:  # the jobs it stored, as the next round would read them
            self._inserted[row[0]] = (write, row)
        self._pending_rows = []

    def _rolled_back(self) -> None:
        self._patches, self._pending_rows = [], []  # what it wrote is read again (its writes counted)

    def update_jobs(self, changes: dict[int, dict]) -> None:
        """``update_job`` of each job id with its fields, in one transaction: the jobs whose same fields
        change, in one statement."""
        by_fields: dict[tuple[str, ...], list[tuple]] = {}
        for job_id, fields in changes.items():
            if fields:
                by_fields.setdefault(tuple(fields), []).append((*fields.values(), job_id))
        stored = {names: job_column_rows(names, rows) for names, rows in by_fields.items()}
        with self.transaction() as conn:
            clean = self._round_rows is not None and [
                job_id for job_id in changes if self._last_write.get(job_id, 0) <= self._round_read
                or self._round_patched.get(job_id) == self._last_write[job_id]]
            self._wrote(changes)
            for names, values in stored.items():
                conn.executemany(f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in names)} WHERE id = ?", values)
            if clean:  # the kept round rows take these values at commit, not read again (a round writes thousands)
                patchable = {job_id: self._writes for job_id in clean}
                for names, values in stored.items():
                    if all(name in _PATCHABLE for name in names):
                        self._patches.append((self._writes, names, [v for v in values if v[-1] in patchable]))

    def _patch_round_rows(self) -> None:
        """Give the kept round rows the values committed by ``update_jobs`` (as the state file would read
        them back), so that the next round reads those jobs again only if something else wrote them."""
        patches, self._patches = self._patches, []
        if self._round_rows is None:
            return
        for write, names, rows in patches:
            if not rows:
                continue
            ids = np.fromiter((row[-1] for row in rows), dtype=np.int64, count=len(rows))
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            columns = {name: [_as_read(name, rows[k][n]) for k in order.tolist()] for n, name in enumerate(names)}
            found = self._round_rows.patch(ids, columns)
            for job_id in ids[found].tolist():
                if self._last_write.get(job_id) == write:
                    self._round_patched[job_id] = write

    def round_table(self) -> RoundColumns:
        """What a round needs of every active job, as columns (name -> array of objects over jobs, by
        id): the round's hot path reads no spec and builds no object per job. ``live``: the job has an
        attempt alive (``pid`` is only information: an executor may have no process ids).

        The rows are kept from one call to the next: only the jobs stored or changed since (every
        write to a job goes through ``insert_job`` or ``update_job``) are read again. The columns are
        the kept rows' own: good until the next call.

        Outside a write transaction the rows are read through a read connection, its snapshot taken
        while no write is open: a long read holds no lock, so a submit's insert does not wait for it."""
        if self._read_only or self._writer == threading.get_ident():
            with self._lock:
                inside = bool(self._depth)
                return self._round_columns(*self._changed_since_round(inside), inside=inside)
        conn = self._reader()
        try:
            with self._lock:  # no write is open: the snapshot holds every write counted in ``writes``
                changed = self._changed_since_round(False)
                conn.execute("BEGIN")
                conn.execute("SELECT 1 FROM jobs LIMIT 1").fetchall()
            self._round_reader = conn  # (only the round's thread reads the round rows)
            return self._round_columns(*changed, inside=False)
        finally:
            self._round_reader = None
            if conn.in_transaction:
                conn.execute("COMMIT")
            self._give_back(conn)

    def _changed_since_round(self, inside: bool) -> tuple[list[int], list[tuple], list[int], int]:
        """Under the lock: (the jobs written since the kept round rows were read, but those the round's
        own writes patched into them; of those, the rows of the jobs stored and not written since,
        taken as they were stored; the ids of the others, to read again; the count of writes now)."""
        changed, writes = self.written_since(self._round_read)
        patched = self._round_patched
        changed = [job_id for job_id in changed if patched.pop(job_id, None) != self._last_write[job_id]]
        inserted = self._inserted
        stored = [inserted[job_id][1] for job_id in changed
                  if job_id in inserted and inserted[job_id][0] == self._last_write[job_id]]
        unread = [job_id for job_id in changed
                  if job_id not in inserted or inserted[job_id][0] != self._last_write[job_id]]
        if not inside:
            self._inserted = {}
        return changed, stored, unread, writes

    def _round_columns(self, changed: list[int], stored: list[tuple], unread: list[int], writes: int, *,
                       inside: bool) -> RoundColumns:
        """round_table's columns: the kept rows with the ``stored`` rows and those of ``unread`` read
        again in place of ``changed``; ``inside``: read inside a write transaction."""
        if self._round_rows is None:
            kept = RoundRows(_ROUND_NAMES, self._round_rows_where(f"{IS_ACTIVE} OR attempt_live"))
        else:
            fresh = list(stored)
            for first in range(0, len(unread), 500):  # SQLite binds a few hundred parameters at most, safely
                chunk = unread[first:first + 500]
                fresh.extend(row for row in self._round_rows_where(f"id IN ({','.join('?' * len(chunk))})", chunk)
                             if row[_ROUND_STATUS] in ACTIVE or row[_ROUND_LIVE])
            fresh.sort(key=lambda row: row[0])
            # read inside a transaction, what it wrote may yet be rolled back: kept as it was, read again then
            kept = self._round_rows.replace(changed, fresh, in_place=not inside)
        if not inside:
            self._round_rows, self._round_read = kept, writes
        return kept.columns()

    def written_since(self, writes: int) -> tuple[list[int], int]:
        """(the jobs stored or changed since the ``writes``-th write to jobs, the count of writes now):
        what a reader that keeps rows between reads reads again. Every write to a job goes through
        ``_insert`` (a job or an array's task), ``update_job``, ``update_jobs`` or ``notified``; one rolled
        back counts too."""
        with self._lock:
            if writes >= self._log_from:  # the writes since, from the log: what changed, not every job written
                found = dict.fromkeys(job_id for batch in self._write_log[writes - self._log_from:] for job_id in batch)
                return list(found), self._writes
            return [job_id for job_id, at in self._last_write.items() if at > writes], self._writes

    def _wrote(self, job_ids) -> None:
        self._writes += 1
        batch = tuple(job_ids)
        for job_id in batch:
            self._last_write[job_id] = self._writes
        self._write_log.append(batch)
        if len(self._write_log) > 4 * len(self._last_write) + 10_000:  # the oldest half: readers that far behind scan
            half = len(self._write_log) // 2
            del self._write_log[:half]
            self._log_from += half

    def _round_rows_where(self, where: str, params: list | tuple = ()) -> list[tuple]:
        """The round columns of the jobs ``where`` picks, through the connection the round reads with."""
        cursor = (self._round_reader or self._conn).execute(f"SELECT {_ROUND_COLUMNS} FROM jobs WHERE {where} ORDER BY id", params)
        cursor.row_factory = None
        return cursor.fetchall()


def _inserted_round_row(**stored) -> tuple:
    """The round-table row of a job just stored with these values (the rest its columns' defaults), as
    SQLite reads it back: REAL columns give floats, INTEGER ones ints."""
    real = {"priority", "submitted", "cpus", "memory_gb", "estimated_duration_s"}
    values = {**_INSERT_DEFAULTS, **stored}
    for name in real:
        if values[name] is not None:
            values[name] = float(values[name])
    for name in ("gpus", "total_steps", "array_id"):
        value = values[name]
        if isinstance(value, float) and value.is_integer() or isinstance(value, bool):
            values[name] = int(value)
    return tuple(values[name] for name in _ROUND_NAMES)


_INSERT_DEFAULTS = {  # a new job's round columns: what _insert stores, or the column's default
    "status": "queued", "reason": "waiting for its first round", "steps_done": 0, "started": None, "live": 0,
    "pid": None, "stop": None, "slots": "", "gpu_type": None, "lease_end": None, "run_s": 0.0, "service_gpu_s": 0.0,
    "service_by_type": "{}", "accounted_at": None, "attempt": 0, "attempt_started": None, "contact_at": None,
    "partner": None, "shared_by_type": "{}", "move_to": "", "batch_size": None, "batch_log": "",
}


def _as_read(name: str, value):
    """``value``, stored in round column ``name``, as SQLite returns it (REAL gives floats, INTEGER ints)."""
    if value is None:
        return None
    kind = _PATCHABLE[name]
    if kind is float:
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind is int and isinstance(value, bool):
        return int(value)
    return value
