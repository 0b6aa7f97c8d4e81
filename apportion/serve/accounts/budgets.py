"""Per-user budgets: what one user may hold of the server, charged in one place for every submit.

Every request that stores or schedules work (a job, a job array, a retried submit that stores
anything) is charged to the user whose jobs it stores (an admin acting for a user charges that
user) before it is stored:

- **active jobs** (queued, running or preempted; an array counts its tasks);
- **stored bytes**: the job specs as the state file keeps them (their env, command, claims);
- **demand rows**: the rows each job claims of the optional resources (``Resource.claims``: a privacy
  claim's blocks), summed over the jobs;
- **``after`` edges**: the jobs each job waits for, summed over the jobs (an array's once, as it is kept);
- **submits per second**: a token bucket per user (``submit_burst`` at once, ``submit_rate`` a second).

What each user holds is counted in the state file itself: each job's charge is a row of
``budget_charges`` (an array's, one row for all its tasks), and ``budget_use`` keeps each user's
totals: a submit adds its charge, and SQLite triggers count a job stored and move its charge when
it leaves the active statuses (completed, failed, cancelled) or comes back, whichever code path
changes it. A check is one primary-key lookup, never a scan of the user's jobs; the
totals are counted again from the jobs once when the server starts (an older state file, or any
drift, is set right then).

Over a quota: :class:`OverQuota` (HTTP 409) naming the limit and what the user holds; over the
rate: :class:`TooFast` (HTTP 429 with ``Retry-After``). The limits are ``apportion serve`` flags
and config file keys (settings.py), with a per-user table in the config file (``user_budgets:``);
admins have the same limits as anyone unless that table gives them others.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from apportion.serve.accounts.limits import BudgetRules, Limits
from apportion.serve.store.state import ACTIVE, StateStore

MB = 1_000_000  # bytes in the MB of max_stored_mb
TASK_ROW_BYTES = 512  # what one array task's own row adds (its numbers, name, checkpoint directory, index entries)
ROW_BYTES = 64  # what one demand row adds to a job's stored bytes (its columns and index entry)
# what the demand-rows quota's 409 and its /metrics help call the rows, where no one resource says
# (``Resource.demand_rows_are``: the privacy ledger's are the blocks its claims name)
DEMAND_ROWS = ("demand rows (what jobs claim of the server's resources, summed over jobs)",
               "Demand rows: what jobs claim of the server's resources, summed over each user's active jobs")
MOST_BUCKETS = 10_000  # users' rate buckets kept; full ones (which say nothing) are dropped past it
MOST_SHOWN = 100  # users an admin's status lists, those holding the most active jobs first

_ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in ACTIVE) + ")"


def _charged(job: str, column: str) -> str:
    """SQL for what job ``job`` (``old`` or ``new`` in a trigger) is charged of ``column`` (bytes or demand
    rows): its own row's, else its array's (one row an array, each task charged it), else nothing."""
    return (f"COALESCE((SELECT {column} FROM budget_charges WHERE job_id = {job}.id),"
            f" (SELECT {column} FROM budget_charges WHERE job_id = {job}.array_id), 0)")


def _edges(job: str, tasks: int) -> str:
    """SQL for the ``after`` edges that go (or come back) with job ``job``: its own; for an array's task,
    its array's, once, when the array's active tasks have just become ``tasks`` (0: the last ended; 1:
    the first came back). An array's ``after`` is kept once for all its tasks."""
    return (f"CASE WHEN {job}.array_id IS NULL THEN COALESCE((SELECT after_edges FROM budget_charges WHERE job_id ="
            f" {job}.id), 0) ELSE COALESCE((SELECT after_edges FROM budget_charges WHERE job_id = {job}.array_id"
            f" AND tasks = {tasks}), COALESCE((SELECT after_edges FROM budget_charges WHERE job_id = {job}.id), 0),"
            " 0) END")


_TABLES = """
CREATE TABLE IF NOT EXISTS budget_charges (  -- what each job (or each task of an array) holds of its user's budgets
    job_id INTEGER PRIMARY KEY,         -- a job's id, or an array's: then each of its tasks holds its bytes and rows
    bytes INTEGER NOT NULL,             -- its spec as stored (its share of its array's), its demand rows
    demand_rows INTEGER NOT NULL,       -- the rows it claims of the optional resources
    after_edges INTEGER NOT NULL,       -- the jobs it waits for; an array's: once for all its tasks
    tasks INTEGER NOT NULL DEFAULT 0    -- an array's: its tasks still active (its edges are held while any is)
);
CREATE TABLE IF NOT EXISTS budget_use (  -- each user's active jobs and what they hold (budgets.py)
    user TEXT PRIMARY KEY,
    active_jobs INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    demand_rows INTEGER NOT NULL DEFAULT 0,
    after_edges INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"""
_TRIGGERS = ("budget_job_charged", "budget_job_stored", "budget_job_ended", "budget_job_again", "budget_job_deleted")
_RELEASE = f"""
BEGIN
    UPDATE budget_charges SET tasks = tasks - 1 WHERE job_id = old.array_id;
    UPDATE budget_use SET active_jobs = active_jobs - 1, bytes = bytes - {_charged("old", "bytes")},
        demand_rows = demand_rows - {_charged("old", "demand_rows")}, after_edges = after_edges - {_edges("old", 0)}
    WHERE user = old.user;
END;"""
_SCHEMA = f"""
CREATE TRIGGER budget_job_stored AFTER INSERT ON jobs WHEN new.status IN {_ACTIVE_SQL}
BEGIN
    INSERT INTO budget_use (user, active_jobs) VALUES (new.user, 1)
    ON CONFLICT (user) DO UPDATE SET active_jobs = active_jobs + 1;
END;
CREATE TRIGGER budget_job_ended AFTER UPDATE OF status ON jobs
WHEN old.status IN {_ACTIVE_SQL} AND new.status NOT IN {_ACTIVE_SQL}{_RELEASE}
CREATE TRIGGER budget_job_again AFTER UPDATE OF status ON jobs
WHEN old.status NOT IN {_ACTIVE_SQL} AND new.status IN {_ACTIVE_SQL}
BEGIN
    INSERT INTO budget_use (user) VALUES (new.user) ON CONFLICT (user) DO NOTHING;
    UPDATE budget_charges SET tasks = tasks + 1 WHERE job_id = new.array_id;
    UPDATE budget_use SET active_jobs = active_jobs + 1, bytes = bytes + {_charged("new", "bytes")},
        demand_rows = demand_rows + {_charged("new", "demand_rows")}, after_edges = after_edges + {_edges("new", 1)}
    WHERE user = new.user;
END;
CREATE TRIGGER budget_job_deleted AFTER DELETE ON jobs WHEN old.status IN {_ACTIVE_SQL}{_RELEASE}
"""


def rules_from_settings(settings) -> BudgetRules:
    """The budgets a ServeSettings gives: its limits for everyone, and its ``user_budgets`` over them."""
    default = Limits.from_settings(settings)
    return BudgetRules(default, {user: replace(default, **limits) for user, limits in settings.user_budgets.items()})


@dataclass(frozen=True)
class Charge:
    """What one submit stores: ``jobs`` jobs (an array's tasks), each holding these bytes and demand rows,
    and ``after_edges`` for them all (an array's ``after`` is kept once)."""

    jobs: int
    bytes_each: int
    demand_rows_each: int = 0
    after_edges: int = 0


@dataclass(frozen=True)
class Use:
    """What a user holds now: their active jobs, and the bytes, demand rows and ``after`` edges of those."""

    active_jobs: int = 0
    bytes: int = 0
    demand_rows: int = 0
    after_edges: int = 0


class OverQuota(Exception):
    """A submit that would take its user past a budget (HTTP 409): ``key`` names the limit."""

    def __init__(self, message: str, key: str, held: float, limit: float) -> None:
        super().__init__(message)
        self.key, self.held, self.limit = key, held, limit


class TooFast(Exception):
    """A user submitting faster than their rate (HTTP 429); ``retry_after``: seconds until one more fits."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def charge_of(data: dict, tasks: int, rows: int, after: int, array: bool = False) -> Charge:
    """The charge of storing job spec ``data`` as ``tasks`` jobs, each claiming ``rows`` demand rows,
    waiting for ``after`` jobs (an array's ``after`` is kept once). An array's spec is stored once (``arrays``), so its bytes are split
    among its tasks, each of which adds a small row of its own (TASK_ROW_BYTES)."""
    spec_bytes = len(json.dumps(data).encode())  # what the state file stores (json.dumps: ASCII, as stored)
    each = -(-spec_bytes // tasks) + TASK_ROW_BYTES if array else spec_bytes
    return Charge(tasks, each + rows * ROW_BYTES, rows, after)


class SubmitRate:
    """Each user's submits as a token bucket: ``burst`` at once, refilled at ``rate`` a second (thread-safe)."""

    def __init__(self, rules: BudgetRules, clock: Callable[[], float] = time.monotonic) -> None:
        self.rules = rules
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, when counted)
        self._lock = threading.Lock()

    def take(self, user: str) -> None:
        """Take one submit from ``user``'s bucket; TooFast when it is empty."""
        limits = self.rules.of(user)
        now = self.clock()
        with self._lock:
            tokens, since = self._buckets.get(user, (float(limits.submit_burst), now))
            tokens = min(float(limits.submit_burst), tokens + max(0.0, now - since) * limits.submit_rate)
            if tokens < 1.0:
                self._buckets[user] = (tokens, now)
                wait = (1.0 - tokens) / limits.submit_rate
                raise TooFast(f"{user} submits faster than their budget allows: {limits.submit_burst:,} at once "
                              f"({self.rules.where(user, 'submit_burst')}), then {limits.submit_rate:g} a second "
                              f"({self.rules.where(user, 'submit_rate')}); retry in {wait:.2g} s", wait)
            self._buckets[user] = (tokens - 1.0, now)
            if len(self._buckets) > MOST_BUCKETS:
                self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled: they hold nothing a new bucket would not."""
        for user, (tokens, since) in list(self._buckets.items()):
            limits = self.rules.of(user)
            if tokens + (now - since) * limits.submit_rate >= limits.submit_burst:
                del self._buckets[user]


class Budgets:
    """Each user's budgets over the state file: checks a submit's charge, records it, shows what users hold."""

    def __init__(self, store: StateStore, rules: BudgetRules | None = None,
                 clock: Callable[[], float] = time.monotonic, rows_are: tuple[str, str] = DEMAND_ROWS) -> None:
        self.store = store
        self.rows_are = rows_are  # what its 409 and /metrics call the demand rows (DEMAND_ROWS)
        self.rules = rules or BudgetRules()
        self.rate = SubmitRate(self.rules, clock)
        with store.transaction() as conn:  # the tables kept, the triggers as this version writes them
            _run_script(conn, _TABLES)  # in the transaction: executescript would commit it
            if "tasks" not in {row[1] for row in conn.execute("PRAGMA table_info(budget_charges)")}:
                conn.execute("ALTER TABLE budget_charges ADD COLUMN tasks INTEGER NOT NULL DEFAULT 0")
            for name in _TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            _run_script(conn, _SCHEMA)
            recount(conn)

    def take_submit(self, user: str) -> None:
        """One submit of ``user`` against their rate: TooFast when over it. Called before anything is parsed."""
        self.rate.take(user)

    def check(self, user: str, charge: Charge) -> None:
        """OverQuota unless ``user`` may store ``charge`` on top of what they hold (inside the write
        transaction that stores it, so that two submits cannot both take the last of a budget)."""
        held = self.use(user)
        limits = self.rules.of(user)
        jobs = charge.jobs
        asks = (("max_active_jobs", held.active_jobs, jobs, "active jobs", _count),
                ("max_stored_mb", held.bytes, jobs * charge.bytes_each, "of stored jobs", _megabytes),
                ("max_demand_rows", held.demand_rows, jobs * charge.demand_rows_each, self.rows_are[0], _count),
                ("max_after_edges", held.after_edges, charge.after_edges, "after edges (jobs waited for, summed "
                 "over jobs; an array's once)", _count))
        for key, have, adds, what, shown in asks:
            limit = getattr(limits, key) * (MB if key == "max_stored_mb" else 1)
            if adds and have + adds > limit:
                raise OverQuota(f"{user} holds {shown(have)} {what}, the limit ({self.rules.where(user, key)}) is "
                                f"{shown(limit)}; this submit would add {shown(adds)}: submit it when some have "
                                "ended, or ask an admin for a larger budget", key, have, limit)

    def record(self, user: str, job_ids: list[int], charge: Charge, array_id: int | None = None) -> None:
        """Keep the charge of ``user``'s new ``job_ids`` (the tasks of ``array_id``, if given: one row for
        them all), and add it to their totals, inside the transaction that stores the jobs (which counted
        them as active jobs already: the triggers above)."""
        with self.store.transaction() as conn:
            if array_id is None:
                conn.executemany("INSERT OR REPLACE INTO budget_charges (job_id, bytes, demand_rows, after_edges)"
                                 " VALUES (?, ?, ?, ?)",
                                 [(job_id, charge.bytes_each, charge.demand_rows_each, charge.after_edges)
                                  for job_id in job_ids])
            else:
                conn.execute("INSERT OR REPLACE INTO budget_charges (job_id, bytes, demand_rows, after_edges, tasks)"
                             " VALUES (?, ?, ?, ?, ?)", (array_id, charge.bytes_each, charge.demand_rows_each,
                                                         charge.after_edges, len(job_ids)))
            edges = charge.after_edges * (len(job_ids) if array_id is None else 1)
            conn.execute("UPDATE budget_use SET bytes = bytes + ?, demand_rows = demand_rows + ?,"
                         " after_edges = after_edges + ? WHERE user = ?",
                         (len(job_ids) * charge.bytes_each, len(job_ids) * charge.demand_rows_each, edges, user))

    def use(self, user: str) -> Use:
        """What ``user`` holds now (one primary-key lookup)."""
        rows = self.store.rows("SELECT active_jobs, bytes, demand_rows, after_edges FROM budget_use WHERE user = ?",
                               (user,))
        return Use(*rows[0]) if rows else Use()

    def uses(self, most: int = MOST_SHOWN) -> dict[str, Use]:
        """The ``most`` users holding the most active jobs (then bytes) and what each holds."""
        rows = self.store.rows("SELECT user, active_jobs, bytes, demand_rows, after_edges FROM budget_use"
                               " WHERE active_jobs > 0 OR bytes > 0 ORDER BY active_jobs DESC, bytes DESC, user"
                               " LIMIT ?", (most,))
        return {user: Use(*rest) for user, *rest in rows}

    def total(self) -> Use:
        """What every user together holds."""
        rows = self.store.rows("SELECT COALESCE(SUM(active_jobs), 0), COALESCE(SUM(bytes), 0),"
                               " COALESCE(SUM(demand_rows), 0), COALESCE(SUM(after_edges), 0) FROM budget_use")
        return Use(*rows[0])

    def shown(self, user: str | None, sees_all: bool) -> list[dict]:
        """Each user's use against their limits, as ``GET /status`` shows it: ``user``'s own, or (``sees_all``:
        an admin, an open server) every user holding anything, the most active first, and ``user``."""
        chosen = self.uses() if sees_all else {}
        if user is not None and user not in chosen:
            chosen[user] = self.use(user)
        return [usage_dict(name, use, self.rules.of(name)) for name, use in chosen.items()]


def usage_dict(user: str, use: Use, limits: Limits) -> dict:
    """One user's use and limits, by the settings' names."""
    return {"user": user, "active_jobs": use.active_jobs, "max_active_jobs": limits.max_active_jobs,
            "stored_mb": round(use.bytes / MB, 6), "max_stored_mb": limits.max_stored_mb,
            "demand_rows": use.demand_rows, "max_demand_rows": limits.max_demand_rows,
            "after_edges": use.after_edges, "max_after_edges": limits.max_after_edges,
            "submit_rate": limits.submit_rate, "submit_burst": limits.submit_burst}


def recount(conn) -> None:
    """Count every user's totals again from their active jobs: active jobs stored before budgets were
    kept are charged their row's spec and ``after`` as stored; each array's active tasks are counted
    again."""
    conn.execute(f"INSERT INTO budget_charges (job_id, bytes, demand_rows, after_edges)"
                 f" SELECT id, LENGTH(CAST(spec AS BLOB)), 0, CASE WHEN after = '' THEN 0"
                 f" ELSE LENGTH(after) - LENGTH(REPLACE(after, ',', '')) + 1 END"
                 f" FROM jobs WHERE status IN {_ACTIVE_SQL} AND id NOT IN (SELECT job_id FROM budget_charges)"
                 f" AND (array_id IS NULL OR array_id NOT IN (SELECT job_id FROM budget_charges))")
    conn.execute(f"UPDATE budget_charges SET tasks = (SELECT COUNT(*) FROM jobs WHERE jobs.array_id ="
                 f" budget_charges.job_id AND jobs.status IN {_ACTIVE_SQL}) WHERE tasks != 0 OR job_id IN"
                 f" (SELECT array_id FROM jobs WHERE array_id IS NOT NULL AND status IN {_ACTIVE_SQL})")
    conn.execute("DELETE FROM budget_use")
    conn.execute(f"INSERT INTO budget_use (user, active_jobs, bytes, demand_rows, after_edges)"
                 f" SELECT j.user, COUNT(*), SUM(COALESCE(c.bytes, a.bytes, 0)),"
                 f" SUM(COALESCE(c.demand_rows, a.demand_rows, 0)), SUM(COALESCE(c.after_edges, 0))"
                 f" FROM jobs j LEFT JOIN budget_charges c ON c.job_id = j.id"
                 f" LEFT JOIN budget_charges a ON a.job_id = j.array_id"
                 f" WHERE j.status IN {_ACTIVE_SQL} GROUP BY j.user")
    # each array's edges once, to the user of its first task (an array's id is the one before it)
    conn.execute("UPDATE budget_use SET after_edges = after_edges + COALESCE((SELECT SUM(a.after_edges) FROM"
                 " budget_charges a JOIN jobs j ON j.id = a.job_id + 1 AND j.array_id = a.job_id WHERE a.tasks > 0"
                 " AND j.user = budget_use.user), 0)")


def _run_script(conn, script: str) -> None:
    """``script``'s statements one by one (executescript would commit the open transaction)."""
    import sqlite3

    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""


def _count(value: float) -> str:
    return f"{int(value):,}"


def _megabytes(value: float) -> str:
    return f"{value / MB:,.2f} MB" if value < 10 * MB else f"{value / MB:,.0f} MB"
