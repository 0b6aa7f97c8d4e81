"""The server's state in one SQLite file (``STATE_DIR/state.db``): jobs, attempts, credentials,
measurements, events, all in one ``StateStore``.

Every change is one transaction, so a server killed at any moment leaves a consistent file;
a restarted server re-reads everything from it. The store is composed of one part per table
family, each module owning its tables' schema and SQL: jobs.py (jobs, submit keys, ``after``
edges), arrays.py, round_table.py (the round's rows kept between rounds), attempts.py,
credentials.py, measurements.py, samples.py, events.py (and meta); a resource's tables are its package's (``add_family``);
connection.py holds the connections they all read and write through.
"""

from __future__ import annotations

from pathlib import Path

import sqlite3

from apportion.serve.jobs.records import JobRecord, job_record
from apportion.serve.store.arrays import ARRAY_SPEC_CACHE_CHARS, ARRAYS, ArrayTables
from apportion.serve.store.attempts import (ACCOUNTING_ATTEMPT_COLUMNS, ACCOUNTING_JOB_COLUMNS, ATTEMPTS,
                                            AttemptTables)
from apportion.serve.store.connection import READERS_KEPT
from apportion.serve.store.credentials import CREDENTIALS, CredentialTables
from apportion.serve.store.events import EVENTS, EventTables
from apportion.serve.store.jobs import ACTIVE, ARRAY_TYPES, JOBS, STATUSES, TERMINAL, parsed_spec
from apportion.serve.store.measurements import MEASUREMENTS, MeasurementTables
from apportion.serve.store.round_table import RoundTable
from apportion.serve.store.samples import SAMPLES, SampleTables
from apportion.serve.store.schema import TableFamily

__all__ = ["ACCOUNTING_ATTEMPT_COLUMNS", "ACCOUNTING_JOB_COLUMNS", "ACTIVE", "ARRAY_SPEC_CACHE_CHARS", "ARRAY_TYPES",
           "READERS_KEPT", "SCHEMA", "SCHEMA_FAMILIES", "STATUSES", "TERMINAL", "StateStore", "TableFamily",
           "parsed_spec"]

# the tables every state file keeps, in the order they are made and migrated (jobs before arrays: an
# array's migration reads the jobs' columns). A package that keeps tables of its own adds its family here.
SCHEMA_FAMILIES: list[TableFamily] = [EVENTS, JOBS, ARRAYS, ATTEMPTS, CREDENTIALS, MEASUREMENTS, SAMPLES]
SCHEMA = "".join(family.schema for family in SCHEMA_FAMILIES)  # the whole schema, as a new file gets it


class StateStore(RoundTable, ArrayTables, AttemptTables, CredentialTables, MeasurementTables, SampleTables,
                 EventTables):
    """Thin, typed access to the state file, one part per table family. Rows come back as records (records.py)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """``read_only``: open an existing file to read it only (a replay), changing nothing, not even
        its schema; sqlite3.Error if it is missing or not a state file."""
        self._open(path, read_only)
        self._start_round_table()
        self._start_arrays()
        if not read_only:
            self._create(SCHEMA_FAMILIES)
            self._tighten()

    def _record(self, row: sqlite3.Row) -> JobRecord:
        """A ``jobs`` row as a record, a task's spec put together with its array's (parsed once)."""
        array_id = row["array_id"] if "array_id" in row.keys() else None
        return job_record(row, None if array_id is None else self.array_spec(array_id))
