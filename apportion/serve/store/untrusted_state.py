"""A state file read as untrusted input (``apportion history --state-dir``): whoever could write
the file may have put anything in it, so it is opened read-only, only its tables are read (never
a view, a virtual table or a generated column, any of which could run a query of the writer's
choosing: a recursive view never ends), every query stops at a time limit, no value may be
longer than ``MAX_VALUE`` bytes, and every value read is checked (its type, a finite number in
its range) before anything counts with it. A problem is one :class:`DamagedState` line naming
the file, the table, the row and the field.

It opens a connection of its own on purpose, the one module that does beside connection.py: the
file is not the server's, so it must not go through ``StateStore``, which would create or migrate
tables in it, trust its schema (views and triggers included) and keep its rows in caches.
"""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import numpy as np

from apportion.serve.store.attempts import ACCOUNTING_ATTEMPT_COLUMNS, ACCOUNTING_JOB_COLUMNS

TIME_LIMIT_S = 30.0  # all the queries together; a state file of a million jobs reads in a few seconds
MAX_VALUE = 1 << 20  # bytes in one text value: names, reasons and slot lists are far shorter
LATEST_TIME = 1e11  # Unix seconds (the year 5138): a later time is damage, not a date
MOST = 1 << 53  # counts and ids: exact as floats, and as numpy's int64

_TEXT = ("name", "user", "queue", "status", "reason", "reason_log", "slots")
_TIMES = ("submitted", "started", "finished", "ended")
_MAY_BE_NULL = ("started", "finished", "ended", "exit_code", "gpu_type")
_COUNTS = ("id", "job_id", "attempt", "preemptions", "retries", "hangs")


class DamagedState(Exception):
    """The state file cannot be read as one: ``str(err)`` is one line saying where and why."""


def read_accounting(path: str | Path, time_limit_s: float = TIME_LIMIT_S) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """The accounting columns of the state file at ``path``, as ``StateStore.accounting_columns``
    gives them, every value checked; DamagedState on anything else."""
    path = Path(path)
    deadline = time.monotonic() + time_limit_s
    try:
        conn = _open(path)
    except sqlite3.Error as err:
        raise DamagedState(f"{path}: cannot open it as a state file ({err})") from None
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)  # nonzero: the query is interrupted
    try:
        conn.execute("BEGIN")  # one snapshot of both tables
        jobs = _columns(conn, path, "jobs", ACCOUNTING_JOB_COLUMNS, "id")
        attempts = _columns(conn, path, "attempts", ACCOUNTING_ATTEMPT_COLUMNS, "job_id, attempt")
    except sqlite3.OperationalError as err:
        if time.monotonic() > deadline:
            raise DamagedState(f"{path}: reading it took longer than {time_limit_s:g} s: is it a state file?") from None
        raise DamagedState(f"{path}: cannot read it as a state file ({err})") from None
    except sqlite3.Error as err:
        raise DamagedState(f"{path}: cannot read it as a state file ({err})") from None
    finally:
        conn.close()
    _check(path, "jobs", jobs, ("id",))
    _check(path, "attempts", attempts, ("job_id", "attempt"))
    if (np.diff(np.asarray(jobs["id"], dtype=np.int64)) <= 0).any():  # read in id order: each greater than the last
        raise DamagedState(f"{path}: table jobs: two rows have the same id")
    return jobs, attempts


def _open(path: Path) -> sqlite3.Connection:
    """A read-only connection (no -wal or -shm file created where no server has one open), with
    the schema's own code distrusted and a bound on every value's length."""
    still = "" if Path(f"{path}-wal").exists() else "&immutable=1"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{still}", uri=True, isolation_level=None, timeout=5)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    return conn


def _columns(conn: sqlite3.Connection, path: Path, table: str, wanted: dict[str, object],
             order: str) -> dict[str, tuple]:
    """The ``wanted`` columns of ``table`` (a plain table, or DamagedState), in ``order``; a column
    the file lacks (an older apportion wrote it) filled with its default, a missing ``attempts``
    table empty."""
    found = conn.execute("SELECT type, sql FROM sqlite_master WHERE name = ?", (table,)).fetchall()
    if not found:
        if table == "jobs":
            raise DamagedState(f"{path}: no table jobs: is it a server's state file?")
        return {name: () for name in wanted}
    kind, sql = found[0]
    if kind != "table" or (sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
        raise DamagedState(f"{path}: {table} is a {'virtual table' if kind == 'table' else kind}, not a table: "
                           "a state file's are tables")
    info = conn.execute(f"PRAGMA table_xinfo({table})").fetchall()  # hidden: 2 or 3 for a generated column
    generated = [row[1] for row in info if row[1] in wanted and row[6] in (2, 3)]
    if generated:
        raise DamagedState(f"{path}: table {table}: column {generated[0]!r} is computed, not stored")
    have = {row[1] for row in info}
    chosen = ", ".join(f'"{name}"' if name in have else "NULL" for name in wanted)
    rows = conn.execute(f'SELECT {chosen} FROM "{table}" ORDER BY {order}').fetchall()
    columns = list(zip(*rows)) or [()] * len(wanted)
    return {name: (column if name in have else (default,) * len(column))
            for (name, default), column in zip(wanted.items(), columns)}


def _check(path: Path, table: str, columns: dict[str, tuple], key: tuple[str, ...]) -> None:
    """DamagedState naming the first value of ``columns`` that is not what its field holds."""
    for name, values in columns.items():
        if _all_fine(name, values):
            continue
        problem = _problem_of(name)
        row = next(i for i, value in enumerate(values) if problem(value) is not None)
        where = ", ".join(f"{k}={_shown(columns[k][row])}" for k in key)
        raise DamagedState(f"{path}: table {table}, row {where}: field {name!r} {problem(values[row])}")


def _all_fine(name: str, values: tuple) -> bool:
    """Whether every value of field ``name`` passes its check: the whole column at once (a million
    rows in a fraction of a second); False sends :func:`_check` looking for the first that does not."""
    types = set(map(type, values))
    nullable = name in _MAY_BE_NULL
    allowed = {type(None)} if nullable else set()
    if name in _TEXT or name == "gpu_type":
        return types <= allowed | {str}
    if name in _TIMES:
        if not types <= allowed | {int, float}:
            return False
        numbers = np.array([v for v in values if v is not None] if type(None) in types else values, dtype=float)
        return bool(np.isfinite(numbers).all()) and (not len(numbers) or (numbers.min() >= 0 and
                                                                          numbers.max() <= LATEST_TIME))
    if name == "exit_code":
        numbers = [v for v in values if v is not None]
        return types <= {type(None), int} and (not numbers or (min(numbers) >= -(1 << 31) and max(numbers) < 1 << 31))
    if name in _COUNTS:
        return types <= {int} and (not values or (min(values) >= 0 and max(values) < MOST))
    return True


def _problem_of(name: str):
    """The check of field ``name``: value -> None when it is fine, else what is wrong with it."""
    nullable = name in _MAY_BE_NULL
    if name in _TEXT or name == "gpu_type":
        return lambda v: None if isinstance(v, str) or (v is None and nullable) else \
            f"must be text, got {_shown(v)}"
    if name in _TIMES:
        return lambda v: None if (v is None and nullable) or (_is_number(v) and 0 <= v <= LATEST_TIME) else \
            f"must be a time (Unix seconds, 0 to {LATEST_TIME:g}), got {_shown(v)}"
    if name == "exit_code":
        return lambda v: None if v is None or (type(v) is int and -(1 << 31) <= v < (1 << 31)) else \
            f"must be an exit status (a whole number), got {_shown(v)}"
    if name in _COUNTS:
        return lambda v: None if type(v) is int and 0 <= v < MOST else \
            f"must be a whole number from 0 to 2^53, got {_shown(v)}"
    return lambda v: None


def _is_number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
