"""A family of the state file's tables: its schema and how an older file's tables are brought up to it.

Each module of the store that keeps tables (jobs.py, arrays.py, attempts.py, credentials.py,
measurements.py, samples.py, events.py and a resource's) says so with one ``TableFamily``;
``state.SCHEMA_FAMILIES`` lists them, and a store opened for writing runs every family's schema
then its ``migrate``, in that order. A package above the store that keeps tables of its own in
the state file adds its family to that list (one line) or to an open store (``StateStore.add_family``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable

Migrate = Callable[["object"], None]  # (the store) -> None: runs its own transactions


@dataclass(frozen=True)
class TableFamily:
    """Tables kept together: ``schema``, statements that are all IF NOT EXISTS (run again at every
    start, changing nothing once done); ``migrate(store)``, what a file written by an older
    apportion needs beyond them (columns added since, data moved), a no-op on a current file."""

    name: str
    schema: str
    migrate: Migrate | None = None


def add_columns(conn: sqlite3.Connection, table: str, columns: dict[str, str]) -> set[str]:
    """Add to ``table`` those of ``columns`` (name -> definition) it lacks; the columns it had."""
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    for name, definition in columns.items():
        if name not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
    return have
