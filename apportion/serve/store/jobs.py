"""Jobs: one row a job (the spec as submitted, where it stands, its current attempt, its accounting),
the idempotency keys of submissions, and what jobs not started yet wait for (``after``). Rows come
back as ``JobRecord`` (jobs/records.py); long lists as plain tuples of the columns asked for.
"""

from __future__ import annotations

import json
import re
import sqlite3

from apportion.serve.jobs.job_array import composed_spec
from apportion.serve.jobs.records import JobRecord, job_column_value
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily, add_columns

STATUSES = ("queued", "running", "preempted", "completed", "failed", "cancelled")
ACTIVE = ("queued", "running", "preempted")  # the scheduler still has work to do for these
TERMINAL = ("completed", "failed", "cancelled")
IS_ACTIVE = "status IN ('queued', 'running', 'preempted')"  # ACTIVE, in SQL
# promised slots, not started yet (+status: through jobs_to_start, not the index on status)
_PENDING_START = f"NOT attempt_live AND slots != '' AND +{IS_ACTIVE}"
ARRAY_TYPES = ","  # a task's gpu_types column when its array's are kept once (arrays.gpu_types): no type's name
# the columns read as other than themselves: a task's allowed types from its array (a reader that missed this
# would see ARRAY_TYPES, types no slot has, and place the task nowhere: never on a type it may not use)
COLUMN_SQL = {"gpu_types": f"CASE WHEN jobs.gpu_types = '{ARRAY_TYPES}' THEN COALESCE((SELECT arrays.gpu_types FROM"
                           f" arrays WHERE arrays.id = jobs.array_id), jobs.gpu_types) ELSE jobs.gpu_types END AS gpu_types",
              "live": "attempt_live AS live"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    user TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority REAL NOT NULL,
    kind TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    gpu_types TEXT NOT NULL DEFAULT '', -- allowed types, comma-separated; '' = any; ARRAY_TYPES: its array's
    total_steps INTEGER NOT NULL,
    spec TEXT NOT NULL,                 -- the JobSpec as JSON
    status TEXT NOT NULL,               -- one of STATUSES
    reason TEXT NOT NULL DEFAULT '',    -- why it is where it is: shown to everyone
    reason_log TEXT NOT NULL DEFAULT '',-- the log's last line behind a failure: its owner and admins only
    steps_done INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0, -- attempts started so far = the current attempt's number
    retries INTEGER NOT NULL DEFAULT 0, -- crashes retried
    preemptions INTEGER NOT NULL DEFAULT 0,
    attempt_live INTEGER NOT NULL DEFAULT 0, -- 1 while an attempt is alive: started or adopted, not yet settled
    pid INTEGER,                        -- the live attempt's process (group leader) where it has one; information only
    proc_start INTEGER,                 -- its start time in clock ticks (/proc/PID/stat), against PID reuse
    slots TEXT NOT NULL DEFAULT '',     -- slots the live attempt holds, or the slots it will start on
    gpu_type TEXT,                      -- the type of those slots
    lease_end REAL,                     -- Unix time the current lease ends
    stop TEXT,                          -- NULL, 'preempt', 'cancel', 'hung' or 'time_limit': the live attempt must go
    stop_at REAL,                       -- when it should be gone (SIGTERM after a grace period)
    term_at REAL,                       -- when SIGTERM was sent
    submitted REAL NOT NULL,
    started REAL,                       -- first start of any attempt
    finished REAL,
    run_s REAL NOT NULL DEFAULT 0,      -- seconds its attempts held slots
    service_gpu_s REAL NOT NULL DEFAULT 0,
    service_by_type TEXT NOT NULL DEFAULT '{}',  -- {gpu_type: seconds held alone}
    partner INTEGER,                    -- the job sharing its slot this round (space sharing); NULL alone
    shared_by_type TEXT NOT NULL DEFAULT '{}',   -- {"PARTNER_ID:gpu_type": seconds held together}
    move_to TEXT NOT NULL DEFAULT '',   -- a round moved the live attempt: {slots, gpu_type, partner} to restart on
    accounted_at REAL,                  -- service counted up to here for the live attempt
    attempt_started REAL,               -- when the current attempt started
    contact_at REAL,                    -- the current attempt's first lease call
    heard_at REAL,                      -- the current attempt's last lease call or progress report
    data_stall REAL,                    -- the latest report's share of step time waiting for data; NULL: never said
    fetch_stall REAL,                   -- and of it, fetching (I/O); NULL: not known
    preprocess_stall REAL,              -- and pre-processing (CPU); NULL: not known
    cpus REAL,                          -- the CPU cores its spec asks for beside its GPUs; NULL: none
    memory_gb REAL,                     -- the GiB of host memory its spec asks for; NULL: none
    estimated_duration_s REAL,          -- its spec's own estimate of its wall seconds (fastest type); NULL: none
    hangs INTEGER NOT NULL DEFAULT 0,   -- attempts declared hung (silent for its hung_after_s) and stopped
    exit_code INTEGER,
    last_lines TEXT NOT NULL DEFAULT '',
    elastic TEXT NOT NULL DEFAULT '',   -- an elastic job's limits (the spec's `elastic`) as JSON; '' for a fixed size
    batch_size INTEGER,                 -- an elastic job's batch for its next attempt, as its round chose; NULL: its own
    after TEXT NOT NULL DEFAULT '',     -- ids of the jobs it must see completed before it starts, comma-separated
    batch_log TEXT NOT NULL DEFAULT '', -- a target in examples: [[first step, examples before it, batch], ...] an attempt
    notify_pending INTEGER NOT NULL DEFAULT 0, -- 1 while its notify URL is still to be told that it ended
    array_id INTEGER,                   -- a job array's task: the array's id (an id no job holds); NULL otherwise
    array_index INTEGER                 -- and its index in the array (APPORTION_ARRAY_INDEX)
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
CREATE INDEX IF NOT EXISTS jobs_totals ON jobs(status, queue, user);  -- /metrics groups jobs by these, unsorted
CREATE TABLE IF NOT EXISTS submit_keys (  -- idempotency keys of submissions: a retried submit finds its job
    user TEXT NOT NULL,                 -- who submitted: each user's keys are their own
    key TEXT NOT NULL,                  -- the Idempotency-Key header
    job_id INTEGER NOT NULL,
    body TEXT NOT NULL,                 -- SHA-256 of the request, to refuse the same key with another job
    PRIMARY KEY (user, key)
);
CREATE TABLE IF NOT EXISTS after_edges (  -- what jobs not started yet wait for (`after`): an array's once, not a task's
    owner INTEGER NOT NULL,             -- the waiting job's id, or its array's id for an array's tasks
    target INTEGER NOT NULL,            -- a job (or array) id it waits to see completed
    PRIMARY KEY (owner, target)
) WITHOUT ROWID;
"""
_ADDED_COLUMNS = {"attempt_live": "INTEGER NOT NULL DEFAULT 0", "partner": "INTEGER",
                  "shared_by_type": "TEXT NOT NULL DEFAULT '{}'", "move_to": "TEXT NOT NULL DEFAULT ''",
                  "elastic": "TEXT NOT NULL DEFAULT ''",
                  "batch_size": "INTEGER", "batch_log": "TEXT NOT NULL DEFAULT ''", "heard_at": "REAL",
                  "hangs": "INTEGER NOT NULL DEFAULT 0", "reason_log": "TEXT NOT NULL DEFAULT ''",
                  "after": "TEXT NOT NULL DEFAULT ''", "notify_pending": "INTEGER NOT NULL DEFAULT 0",
                  "array_id": "INTEGER", "array_index": "INTEGER",
                  "data_stall": "REAL", "fetch_stall": "REAL", "preprocess_stall": "REAL",
                  "cpus": "REAL", "memory_gb": "REAL", "estimated_duration_s": "REAL"}
_FAILED_WITH_LINE = re.compile(r"(.* on attempt \d+, after \d+ retr(?:y|ies)): (.*)", re.DOTALL)


def _migrate(store) -> None:
    """A state file written by an older apportion gains the jobs' columns added since, with their
    defaults, the indexes on them, and its ``after`` kept as edges."""
    with store.transaction() as conn:  # a column and what fills it, together
        have = add_columns(conn, "jobs", _ADDED_COLUMNS)
        if "cpus" not in have:  # the asks placement counts, as columns the round reads without the spec
            conn.execute("UPDATE jobs SET cpus = json_extract(spec, '$.cpus'), memory_gb = json_extract(spec,"
                         " '$.memory_gb') WHERE json_extract(spec, '$.cpus') IS NOT NULL"
                         " OR json_extract(spec, '$.memory_gb') IS NOT NULL")
        if "estimated_duration_s" not in have:  # a job's own estimate, as a column the round reads without the spec
            conn.execute("UPDATE jobs SET estimated_duration_s = json_extract(spec, '$.estimated_duration_s')"
                         " WHERE json_extract(spec, '$.estimated_duration_s') IS NOT NULL")
        if "attempt_live" not in have:  # an older apportion recorded an attempt alive as a process id
            conn.execute("UPDATE jobs SET attempt_live = 1 WHERE pid IS NOT NULL")
        # the few jobs with a notification still to send, found without reading the others
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_notify ON jobs(id) WHERE notify_pending")
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_id)")  # once the column is there
        # what every tick asks (slots promised, attempts to start, live attempts): the few hundred jobs
        # that hold slots, found without reading the thousands that wait
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_promised ON jobs(slots) WHERE slots != ''")
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_to_start ON jobs(id) WHERE slots != '' AND NOT attempt_live")
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_live ON jobs(id) WHERE attempt_live")
        # the few jobs that ever hung: /status sums their hangs without reading the jobs that never did
        conn.execute("CREATE INDEX IF NOT EXISTS jobs_hung ON jobs(hangs) WHERE hangs > 0")
        if conn.execute("SELECT value FROM meta WHERE key = 'after_edges'").fetchone() is None:
            # an older apportion kept `after` in every task's row: the jobs not started yet wait by edges now
            conn.execute("INSERT OR IGNORE INTO after_edges (owner, target) SELECT COALESCE(j.array_id, j.id),"
                         " CAST(e.value AS INTEGER) FROM jobs j, json_each('[' || j.after || ']') e WHERE"
                         " j.after != '' AND j.started IS NULL AND j.status IN ('queued', 'running', 'preempted')")
            conn.execute("INSERT INTO meta VALUES ('after_edges', '1')")
    if "reason_log" not in have:  # failed jobs' reasons ended with their log's last line: move it apart
        with store.transaction() as conn:
            for job_id, reason in conn.execute("SELECT id, reason FROM jobs WHERE status = 'failed'").fetchall():
                split = _FAILED_WITH_LINE.fullmatch(reason)
                if split:
                    conn.execute("UPDATE jobs SET reason = ?, reason_log = ? WHERE id = ?",
                                 (*split.groups(), job_id))


JOBS = TableFamily("jobs", SCHEMA, _migrate)


class JobTables(StoreConnection):
    """The ``jobs``, ``submit_keys`` and ``after_edges`` tables (a part of ``StateStore``). A job's
    record is ``StateStore._record``'s (a task's spec joins its array's); every write to a job is
    counted (``_wrote``), for the round's kept rows (round_table.py)."""

    def insert_job(self, *, spec: dict, name: str, user: str, queue: str, priority: float, kind: str,
                   gpus: int, total_steps: int, submitted: float, key: tuple[str, str, str] | None = None) -> int:
        """Store a new job; ``key``: (submitter, idempotency key, request digest), kept in the same transaction."""
        with self.transaction() as conn:
            job_id = self._insert(conn, None, spec, name, user, queue, priority, kind, gpus, total_steps, submitted)
            self._add_after_edges(conn, job_id, spec.get("after"))
            if key is not None:
                conn.execute("INSERT INTO submit_keys (user, key, job_id, body) VALUES (?, ?, ?, ?)",
                             (key[0], key[1], job_id, key[2]))
            return job_id

    def _insert(self, conn: sqlite3.Connection, job_id: int | None, spec: dict, name: str, user: str, queue: str,
                priority: float, kind: str, gpus: int, total_steps: int, submitted: float,
                array: tuple[int, int] | None = None, stored: dict | None = None, types: str | None = None) -> int:
        """One job's row and its submit event (``job_id`` None: the next id); its id. ``stored``: the
        part of ``spec`` its row keeps, where the rest is its array's (else all of it); ``types``:
        its ``gpu_types`` column where not its spec's (ARRAY_TYPES: its array's, kept once)."""
        allowed = ",".join(spec.get("gpu_types") or ()) if types is None else types
        elastic = json.dumps(spec["elastic"], sort_keys=True) if spec.get("elastic") else ""
        # a task's `after` is its array's, kept once (after_edges); a job's is kept in its row too, for replays
        after = ",".join(str(i) for i in spec.get("after") or ()) if array is None else ""
        array_id, array_index = array if array is not None else (None, None)
        cursor = conn.execute(
            "INSERT INTO jobs (id, name, user, queue, priority, kind, gpus, gpu_types, total_steps, spec, status,"
            " reason, submitted, elastic, after, array_id, array_index, notify_pending, cpus, memory_gb,"
            " estimated_duration_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 'waiting for its first round', ?,"
            " ?, ?, ?, ?, ?, ?, ?, ?)",
            (job_id, name, user, queue, priority, kind, gpus, allowed, total_steps,
             json.dumps(spec if stored is None else stored), submitted,
             elastic, after, array_id, array_index, int(bool(spec.get("notify"))), spec.get("cpus"),
             spec.get("memory_gb"), spec.get("estimated_duration_s")),
        )
        job_id = int(cursor.lastrowid)
        self._stored(
            id=job_id, name=name, user=user, queue=queue, priority=priority, kind=kind, gpus=gpus, gpu_types=allowed,
            total_steps=total_steps, submitted=submitted, elastic=elastic, after=after, array_id=array_id,
            cpus=spec.get("cpus"), memory_gb=spec.get("memory_gb"), estimated_duration_s=spec.get("estimated_duration_s"))
        self.add_event(submitted, job_id, "submit", f"{name} by {user}")
        return job_id

    @staticmethod
    def _add_after_edges(conn: sqlite3.Connection, owner: int, after) -> None:
        conn.executemany("INSERT OR IGNORE INTO after_edges (owner, target) VALUES (?, ?)",
                         [(owner, int(target)) for target in after or ()])

    def after_edges(self) -> list[tuple[int, int]]:
        """(owner, target) of every ``after`` edge kept: owner a job's id, or an array's for its tasks."""
        with self._read() as conn:
            cursor = conn.execute("SELECT owner, target FROM after_edges")
            cursor.row_factory = None
            return cursor.fetchall()

    def after_edges_of(self, user: str) -> int:
        """How many ``after`` edges ``user``'s jobs and arrays not started yet hold (an array's count once)."""
        with self._read() as conn:
            return int(conn.execute(
                "SELECT COUNT(*) FROM after_edges e WHERE (SELECT user FROM jobs WHERE id = e.owner OR id = e.owner + 1"
                " AND array_id = e.owner ORDER BY id LIMIT 1) = ?", (user,)).fetchone()[0])

    def drop_after_edges(self, owners) -> None:
        """Forget the ``after`` edges of those of ``owners`` (job or array ids) with no job left that has
        not started and is still active: nothing asks about them again."""
        owners = sorted({int(owner) for owner in owners})
        if not owners:
            return
        with self.transaction() as conn:
            for first in range(0, len(owners), 500):
                chunk = owners[first:first + 500]
                conn.execute(
                    f"DELETE FROM after_edges WHERE owner IN ({','.join('?' * len(chunk))}) AND NOT EXISTS (SELECT 1"
                    f" FROM jobs WHERE (id = after_edges.owner OR array_id = after_edges.owner) AND started IS NULL"
                    f" AND {IS_ACTIVE})", chunk)

    def owner(self, job_id: int) -> tuple[str, bool] | None:
        """(its user, whether it is an array) of job or array ``job_id``; None: it is neither. Read from
        the primary key and the index on ``array_id``, nothing else: a refusal costs two key lookups."""
        with self._read() as conn:
            row = conn.execute("SELECT user FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                return row[0], False
            row = conn.execute("SELECT user FROM jobs INDEXED BY jobs_array WHERE array_id = ? LIMIT 1",
                                     (job_id,)).fetchone()
        return (row[0], True) if row is not None else None

    def cancel_active(self, job_id: int, *, array: bool, by: str, now: float) -> tuple[list[int], list[int]]:
        """Cancel job ``job_id`` (``array``: every active task of array ``job_id``) if active, in one
        transaction of a few statements, reading no spec: (the ids cancelled, those of them whose live
        attempt must now be stopped), by id. Each gets a ``cancel`` event naming ``by``."""
        which = "array_id = ?" if array else "id = ?"
        with self.transaction() as conn:
            cursor = conn.execute(f"SELECT id, attempt_live FROM jobs WHERE {which} AND {IS_ACTIVE} ORDER BY id",
                                  (job_id,))
            cursor.row_factory = None
            rows = cursor.fetchall()
            if not rows:
                return [], []
            conn.execute(f"UPDATE jobs SET status = 'cancelled', stop = 'cancel', term_at = ?, finished = ?, reason = ?"
                         f" WHERE {which} AND {IS_ACTIVE} AND attempt_live", (now, now, f"cancelled by {by}; stopping",
                                                                                 job_id))
            conn.execute(f"UPDATE jobs SET status = 'cancelled', slots = '', gpu_type = NULL, partner = NULL,"
                         f" finished = ?, reason = ? WHERE {which} AND {IS_ACTIVE} AND NOT attempt_live",
                         (now, f"cancelled by {by}", job_id))
            ids = [int(i) for i, _ in rows]
            conn.executemany("INSERT INTO events (time, job_id, event, detail) VALUES (?, ?, 'cancel', ?)",
                             [(now, i, f"by {by}") for i in ids])
            self._wrote(ids)
            return ids, [int(i) for i, live in rows if live]

    def active_jobs_of(self, user: str) -> int:
        """How many of ``user``'s jobs are active."""
        with self._read() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM jobs WHERE user = ? AND {IS_ACTIVE}",
                                          (user,)).fetchone()[0])

    def submitted_with(self, user: str, key: str) -> tuple[int, str] | None:
        """The job ``user`` submitted with idempotency key ``key`` and its request's digest, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT job_id, body FROM submit_keys WHERE user = ? AND key = ?",
                                     (user, key)).fetchone()
        return (int(row[0]), row[1]) if row is not None else None

    def update_job(self, job_id: int, **fields) -> None:
        """Set these fields of job ``job_id`` (JobRecord's names; a name that is none: ValueError at once)."""
        if not fields:
            return
        values = [job_column_value(k, v) for k, v in fields.items()]
        columns = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as conn:
            self._wrote((job_id,))
            conn.execute(f"UPDATE jobs SET {columns} WHERE id = ?", (*values, job_id))

    def job(self, job_id: int) -> JobRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._record(row) if row is not None else None

    def jobs(self) -> list[JobRecord]:
        """Every job, by id."""
        return self._select()

    def active_jobs(self) -> list[JobRecord]:
        """Jobs the scheduler still looks after: waiting or running, or with a live attempt."""
        return self._select(f"{IS_ACTIVE} OR attempt_live")

    def live_jobs(self) -> list[JobRecord]:
        """Jobs with a live attempt."""
        return self._select("attempt_live")

    def stopping_attempts(self) -> list[JobRecord]:
        """Jobs whose live attempt has been told to go (preempted or cancelled)."""
        return self._select("attempt_live AND stop IS NOT NULL")

    def overdue_attempts(self, now: float, since: float, hung_after_s: float | None) -> list[int]:
        """Jobs whose live attempt, not told to go, has been silent (no lease call, no progress report,
        counted from its start or ``since``, whichever is later) for its ``hung_after_s`` (the job
        file's, else the one given; None: never), or has run for its ``time_limit`` over all its
        attempts. One query over the few live attempts, reading only these columns."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id FROM jobs WHERE attempt_live AND stop IS NULL AND status = 'running' AND ("
                " ? - MAX(COALESCE(heard_at, 0), COALESCE(attempt_started, 0), ?)"
                " >= COALESCE(json_extract(spec, '$.hung_after_s'), ?)"
                " OR run_s + MAX(0, ? - COALESCE(accounted_at, ?)) >= json_extract(spec, '$.time_limit')"
                ") ORDER BY id", (now, since, hung_after_s, now, now)).fetchall()
        return [job_id for (job_id,) in rows]

    def total_hangs(self) -> int:
        """Attempts declared hung, over every job."""
        with self._read() as conn:
            return int(conn.execute("SELECT COALESCE(SUM(hangs), 0) FROM jobs WHERE hangs > 0").fetchone()[0])

    def pending_start_slots(self) -> list[tuple[int, str, int | None, str]]:
        """(id, slots, partner, reason), by id, of the active jobs promised slots by a round and not
        started on them yet: whether each may start now, without reading whole rows."""
        return self.job_columns(("id", "slots", "partner", "reason"), _PENDING_START)

    def current_jobs(self, finished: int, waiting: int) -> list[JobRecord]:
        """What the dashboard lists, by id, however many jobs wait: every job running, holding or
        promised slots, the first ``waiting`` (by id) of those queued or preempted, and the
        ``finished`` that ended last. Each part is read through an index, the rest never read."""
        n, m = int(waiting), int(finished)
        rows = self._select(
            "id IN (SELECT id FROM jobs WHERE attempt_live UNION SELECT id FROM jobs WHERE slots != ''"
            " UNION SELECT id FROM jobs WHERE status = 'running'"
            f" UNION SELECT * FROM (SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT {n})"
            f" UNION SELECT * FROM (SELECT id FROM jobs WHERE status = 'preempted' ORDER BY id LIMIT {n})"
            " UNION SELECT * FROM (SELECT id FROM jobs WHERE status IN ('completed', 'failed', 'cancelled')"
            f" ORDER BY finished DESC, id DESC LIMIT {m}))")
        held = [r for r in rows if r.status in ("queued", "preempted") and not r.attempt_live and not r.slots]
        dropped = {r.id for r in held[n:]}  # the first ``waiting`` of the two statuses together
        return [r for r in rows if r.id not in dropped]

    def _select(self, where: str = "") -> list[JobRecord]:
        sql = "SELECT * FROM jobs" + (f" WHERE {where}" if where else "") + " ORDER BY id"
        with self._read() as conn:
            rows = conn.execute(sql).fetchall()
        return [self._record(r) for r in rows]

    def job_columns(self, columns: tuple[str, ...], where: str = "", params: list | tuple = (),
                    limit: int | None = None) -> list[tuple]:
        """These columns of the jobs ``where`` picks (SQL over the jobs table, with ``params``), by id,
        the first ``limit``: plain tuples, for lists of many jobs."""
        sql = (f"SELECT {', '.join(COLUMN_SQL.get(c, c) for c in columns)} FROM jobs"
               + (f" WHERE {where}" if where else "") + " ORDER BY id"
               + (" LIMIT ?" if limit is not None else ""))
        with self._read() as conn:
            cursor = conn.execute(sql, (*params, limit) if limit is not None else tuple(params))
            cursor.row_factory = None
            return cursor.fetchall()

    def specs_of(self, ids: list[int]) -> dict[int, str | dict]:
        """The stored spec of each job of ``ids`` that exists: JSON text (``parsed_spec`` reads it), or for
        a task of an array whose spec is stored once, its whole spec put together (its array's parsed once)."""
        found: dict[int, str | dict] = {}
        with self._read() as conn:
            for first in range(0, len(ids), 500):  # SQLite binds a few hundred parameters at most, safely
                chunk = ids[first:first + 500]
                rows = conn.execute(f"SELECT id, spec, array_id, array_index FROM jobs WHERE id IN"
                                          f" ({','.join('?' * len(chunk))})", chunk).fetchall()
                found.update(self._spec_texts(rows))
        return found

    def _spec_texts(self, rows: list[sqlite3.Row]) -> dict[int, str | dict]:
        """(id, spec, array_id, array_index) rows as specs_of answers them."""
        found: dict[int, str | dict] = {}
        for job_id, text, array_id, index in rows:
            shared = None if array_id is None else self.array_spec(array_id)
            if shared is None:
                found[int(job_id)] = text
                continue
            try:
                found[int(job_id)] = composed_spec(shared, json.loads(text), index)
            except (ValueError, TypeError):  # a row damaged since: read as it is, to fail as such
                found[int(job_id)] = text
        return found

    def owners_and_statuses(self, ids: list[int]) -> dict[int, tuple[str, str]]:
        """(user, status) of each job of ``ids`` that exists."""
        found: dict[int, tuple[str, str]] = {}
        with self._read() as conn:
            for first in range(0, len(ids), 500):  # SQLite binds a few hundred parameters at most, safely
                chunk = ids[first:first + 500]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT id, user, status FROM jobs WHERE id IN ({marks})", chunk).fetchall()
                found.update({int(row[0]): (row[1], row[2]) for row in rows})
        return found

    def anyone_waiting(self) -> bool:
        """Is an active job neither running nor promised slots?"""
        with self._read() as conn:
            return conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM jobs WHERE {IS_ACTIVE} AND NOT attempt_live AND slots = '')"
            ).fetchone()[0] == 1

    def slots_taken(self) -> set[str]:
        """Slots held by live attempts or promised to jobs about to start."""
        with self._read() as conn:
            rows = conn.execute("SELECT slots FROM jobs WHERE slots != ''").fetchall()
        return {s for (text,) in rows for s in text.split(",")}

    def asked_on_slots(self) -> tuple[float, float]:
        """(CPU cores, GiB of memory) asked for by the jobs holding slots or promised them."""
        with self._read() as conn:
            cpus, memory_gb = conn.execute(
                "SELECT COALESCE(SUM(cpus), 0), COALESCE(SUM(memory_gb), 0) FROM jobs WHERE slots != ''").fetchone()
        return float(cpus), float(memory_gb)

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        counts = dict.fromkeys(STATUSES, 0)
        counts.update({status: n for status, n in rows})
        return counts

    def job_totals(self, now: float) -> list[tuple[str, str, str, int, int, int, float, str]]:
        """(status, queue, user, first job id, jobs, preemptions, GPU-seconds, slots held) for each such
        group, in one query: GPU-seconds count live attempts' service up to ``now`` (accounting.py's rule:
        seconds × slots), slots held are those of its live attempts, comma-separated ('' for none)."""
        with self._read() as conn:
            return conn.execute(
                "SELECT status, queue, user, MIN(id), COUNT(*), COALESCE(SUM(preemptions), 0),"
                " COALESCE(SUM(service_gpu_s + CASE WHEN attempt_live AND accounted_at IS NOT NULL"
                " THEN MAX(0, ? - accounted_at) * (LENGTH(slots) - LENGTH(REPLACE(slots, ',', '')) + 1)"
                " ELSE 0 END), 0),"
                " COALESCE(GROUP_CONCAT(CASE WHEN attempt_live AND slots != '' THEN slots END), '')"
                " FROM jobs GROUP BY status, queue, user", (now,)).fetchall()

    def notifications_due(self, limit: int) -> list[JobRecord]:
        """Ended jobs (no attempt alive any more) whose notification is still to be sent, oldest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM jobs INDEXED BY jobs_notify WHERE notify_pending AND NOT"
                                      " attempt_live AND status IN ('completed', 'failed', 'cancelled')"
                                      " ORDER BY id LIMIT ?", (limit,)).fetchall()
        return [self._record(r) for r in rows]

    def notified(self, job_id: int, now: float, event: str, detail: str) -> None:
        """Job ``job_id``'s notification is done with (sent or given up): no longer due, and said in its events."""
        with self.transaction() as conn:
            self._wrote((job_id,))
            conn.execute("UPDATE jobs SET notify_pending = 0 WHERE id = ?", (job_id,))
            self.add_event(now, job_id, event, detail)


def parsed_spec(spec: str | dict) -> object:
    """A spec as ``specs_of`` gives it, parsed (ValueError: its JSON text cannot be read)."""
    return spec if isinstance(spec, dict) else json.loads(spec)
