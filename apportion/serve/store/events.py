"""The state file's events (what happened to each job, and to the server) and its meta values
(how the server that wrote it ran, its first round, markers of migrations done)."""

from __future__ import annotations

import json

from apportion.serve.jobs.records import EventRecord, record
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    job_id INTEGER,
    event TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
EVENTS = TableFamily("events", SCHEMA)


class EventTables(StoreConnection):
    """The ``events`` and ``meta`` tables (a part of ``StateStore``)."""

    def add_event(self, time: float, job_id: int | None, event: str, detail: str = "") -> None:
        with self.transaction() as conn:
            conn.execute("INSERT INTO events (time, job_id, event, detail) VALUES (?, ?, ?, ?)",
                         (time, job_id, event, detail))

    def events(self, job_id: int | None = None, limit: int | None = None) -> list[EventRecord]:
        sql = "SELECT * FROM events" + (" WHERE job_id = ?" if job_id is not None else "") + " ORDER BY id"
        params: tuple = (job_id,) if job_id is not None else ()
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        events = [record(EventRecord, r) for r in rows]
        return events[-limit:] if limit else events

    def warning_events(self) -> list[EventRecord]:
        """The warnings about jobs and their clearings, oldest first (what a restarted server carries on)."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM events WHERE event IN ('warning', 'warning-cleared')"
                                " ORDER BY id").fetchall()
        return [record(EventRecord, r) for r in rows]

    def meta(self, key: str, default: str | None = None) -> str | None:
        with self._read() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row is not None else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         (key, value))

    def run_settings(self) -> dict:
        """How the server that wrote this file ran (policy and options, round length, slots): what a
        replay needs to simulate the same; {} for a file written before it was recorded."""
        text = self.meta("run")
        return json.loads(text) if text else {}

    def set_run_settings(self, settings: dict) -> None:
        self.set_meta("run", json.dumps(settings, sort_keys=True))

    def first_round(self) -> float | None:
        """When the first server on this file decided its first round (None: not yet; or written
        by an apportion that did not record it, when the first server's start-up recovery is the
        nearest moment kept: ``first_start``)."""
        text = self.meta("first_round")
        return float(text) if text is not None else None

    def first_start(self) -> float | None:
        """When the first server on this file recovered at its start (None: none did)."""
        with self._read() as conn:
            row = conn.execute("SELECT MIN(time) FROM events WHERE event = 'recover'").fetchone()
        return row[0]

    def set_first_round(self, time: float) -> None:
        self.set_meta("first_round", repr(time))
