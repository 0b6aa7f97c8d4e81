"""The server's state in one SQLite file (``STATE_DIR/state.db``): jobs, throughput estimates, events.

Every change is one transaction, so a server killed at any moment leaves a consistent file;
a restarted server re-reads everything from it. One connection writes, shared by the HTTP threads
and the scheduler thread behind a lock; reads go through connections of their own (WAL mode: a
reader never waits for a write transaction, and sees what was committed), so that a long round
or a big write delays no credential check and no read of the API.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from apportion.serve.jobs.job_array import composed_spec, task_row_spec, task_spec
from apportion.serve.base.private import private_dir, private_file, tighten
from apportion.serve.jobs.records import (AttemptRecord, CredentialHash, DurationRecord, ElasticStepRecord, EventRecord,
                                     JobRecord, UserRecord, job_column_rows, job_column_value, job_record,
                                     record)
from apportion.serve.store.round_rows import RoundColumns, RoundRows
from apportion.serve.base.space import PROBE_BYTES, NoSpace, is_no_space, probe_file

STATUSES = ("queued", "running", "preempted", "completed", "failed", "cancelled")
ACTIVE = ("queued", "running", "preempted")  # the scheduler still has work to do for these
TERMINAL = ("completed", "failed", "cancelled")
READERS_KEPT = 8  # read connections kept open between reads (more are opened while many read at once)
_IS_ACTIVE = "status IN ('queued', 'running', 'preempted')"  # ACTIVE, in SQL
# promised slots, not started yet (+status: through jobs_to_start, not the index on status)
_PENDING_START = f"NOT attempt_live AND slots != '' AND +{_IS_ACTIVE}"

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
CREATE TABLE IF NOT EXISTS throughputs (
    kind TEXT NOT NULL,
    gpu_type TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    steps_per_s REAL NOT NULL,
    samples INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (kind, gpu_type, gpus)
);
CREATE TABLE IF NOT EXISTS durations (  -- finished jobs' GPU time: what the duration predictor learns from
    job_id INTEGER PRIMARY KEY,
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    submitted REAL NOT NULL,
    finished REAL NOT NULL,
    gpu_s REAL NOT NULL                 -- GPU-seconds at its fastest speed: steps × GPUs ÷ fastest steps/s
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    job_id INTEGER,
    event TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (      -- who may call the API (apportion users add): see auth.py
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the number in the user's credential
    name TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL DEFAULT 0,
    salt TEXT NOT NULL,                 -- hex
    digest TEXT NOT NULL,               -- hex, of the credential's secret under kdf
    kdf TEXT NOT NULL,                  -- hmac-sha256 (older: scrypt:16384:8:1)
    created REAL NOT NULL,
    revoked REAL                        -- when its credential was revoked; NULL while it works
);
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
CREATE TABLE IF NOT EXISTS elastic_steps (  -- elastic jobs' measured steps, one row a size: what their models fit
    job_id INTEGER NOT NULL,
    gpu_type TEXT NOT NULL,
    gpus INTEGER NOT NULL,              -- replicas
    nodes INTEGER NOT NULL,
    local_batch REAL NOT NULL,          -- examples in one replica's micro-batch
    step_s REAL NOT NULL,               -- one micro-batch and the synchronisation (smoothed over reports)
    sync_s REAL NOT NULL,               -- the synchronisation alone
    samples INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (job_id, gpu_type, gpus, nodes, local_batch)
);
CREATE TABLE IF NOT EXISTS elastic_models (  -- each elastic job's gradient noise scale and fitted step-time models
    job_id INTEGER PRIMARY KEY,
    noise_scale REAL,                   -- the latest reported, in examples; NULL until reported
    params TEXT NOT NULL DEFAULT '{}',  -- {gpu_type: the 7 step-time parameters fitted to its steps}
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS submit_keys (  -- idempotency keys of submissions: a retried submit finds its job
    user TEXT NOT NULL,                 -- who submitted: each user's keys are their own
    key TEXT NOT NULL,                  -- the Idempotency-Key header
    job_id INTEGER NOT NULL,
    body TEXT NOT NULL,                 -- SHA-256 of the request, to refuse the same key with another job
    PRIMARY KEY (user, key)
);
CREATE TABLE IF NOT EXISTS samples (  -- the dashboard's cluster over time (history.py), bounded by halving
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    queued INTEGER NOT NULL,            -- jobs waiting
    running INTEGER NOT NULL,
    busy TEXT NOT NULL DEFAULT '{}'     -- {gpu_type: busy slots}
);
CREATE TABLE IF NOT EXISTS after_edges (  -- what jobs not started yet wait for (`after`): an array's once, not a task's
    owner INTEGER NOT NULL,             -- the waiting job's id, or its array's id for an array's tasks
    target INTEGER NOT NULL,            -- a job (or array) id it waits to see completed
    PRIMARY KEY (owner, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS core_speeds (  -- each job's steps at each share of CPU cores it ran with (core_speeds.py)
    job_id INTEGER NOT NULL,
    cores_per_gpu REAL NOT NULL,
    steps REAL NOT NULL,
    seconds REAL NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (job_id, cores_per_gpu)
);
CREATE TABLE IF NOT EXISTS arrays (  -- each job array's spec, stored once: its tasks' rows keep only their own part
    id INTEGER PRIMARY KEY,             -- the array's id, held by no job: the one its tasks name
    user TEXT NOT NULL,
    spec TEXT NOT NULL,                 -- the array's JobSpec as JSON: a task's is task_spec's of it, its row's over it
    text TEXT,                          -- its `array` (0-15%4), read each round without the spec
    gpu_types TEXT                      -- its tasks' allowed types, comma-separated, where their rows say ARRAY_TYPES
);
CREATE TABLE IF NOT EXISTS attempt_credentials (  -- each attempt's own credential, as a SHA-256 digest
    job_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
"""


class StateStore:
    """Thin, typed access to the state file. Rows come back as records (records.py)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """``read_only``: open an existing file to read it only (a replay), changing nothing, not even
        its schema; sqlite3.Error if it is missing or not a state file."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        self.full_since: float | None = None  # a write found the state directory out of space then (space.py)
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
        # array id -> its parsed spec (None: no spec stored once), the most recently read first; an
        # array's spec never changes once stored, so each is parsed once while it is kept
        self._array_specs: OrderedDict[int, tuple[dict | None, int]] = OrderedDict()  # (spec, its JSON's length)
        self._array_spec_chars = 0  # the JSON characters of the specs kept: bounded by ARRAY_SPEC_CACHE_CHARS
        self._array_specs_lock = threading.Lock()
        self._writer: int | None = None  # the thread inside a write transaction, which reads what it wrote
        self._round_reader: sqlite3.Connection | None = None  # the connection round_table reads through, meanwhile
        self._readers: list[sqlite3.Connection] = []  # read connections not in use (READERS_KEPT at most)
        self._readers_lock = threading.Lock()
        self._local = threading.local()  # a thread's snapshot (``snapshot``), while it reads in one
        self._read_only = read_only
        if read_only:
            # no write-ahead log beside it (no server has it open): read it as it is, creating no -wal or
            # -shm file that another account's server could not open afterwards
            still = "" if Path(f"{self.path}-wal").exists() else "&immutable=1"
            self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro{still}", uri=True,
                                         check_same_thread=False, isolation_level=None, timeout=30)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("SELECT id FROM jobs LIMIT 1")  # not a state file: sqlite3.Error now
            arrays = {row[1] for row in self._conn.execute("PRAGMA table_info(arrays)")}
            self._has_arrays, self._has_array_texts = bool(arrays), "text" in arrays  # an older file may lack them
            return
        self._has_arrays = self._has_array_texts = True
        private_dir(self.path.parent)
        private_file(self.path)  # the jobs' specs (their env) and the credentials' hashes: owner-only
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: every round reads all active jobs' rows
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(SCHEMA)  # idempotent: every statement is IF NOT EXISTS
        self._add_missing_columns()
        self._store_arrays_once()
        for suffix in ("-wal", "-shm"):  # SQLite gives them the file's mode; an older state dir's may be wider
            tighten(Path(f"{self.path}{suffix}"), 0o600)

    def _add_missing_columns(self) -> None:
        """A state file written by an older apportion gains the columns added since, with their defaults."""
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(jobs)")}
        with self.transaction() as conn:  # a column and what fills it, together
            for name, definition in _ADDED_COLUMNS.items():
                if name not in have:
                    conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {definition}")
            if "cpus" not in have:  # the asks placement counts, as columns the round reads without the spec
                conn.execute("UPDATE jobs SET cpus = json_extract(spec, '$.cpus'), memory_gb = json_extract(spec,"
                             " '$.memory_gb') WHERE json_extract(spec, '$.cpus') IS NOT NULL"
                             " OR json_extract(spec, '$.memory_gb') IS NOT NULL")
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
        arrays = {row[1] for row in self._conn.execute("PRAGMA table_info(arrays)")}
        if "text" not in arrays:  # an arrays table from before it kept the `array` text apart
            with self.transaction() as conn:
                conn.execute("ALTER TABLE arrays ADD COLUMN text TEXT")
                conn.execute("UPDATE arrays SET text = COALESCE(json_extract(spec, '$.array'), '')")
        if "gpu_types" not in arrays:  # and its tasks' types: their rows keep them, as they were
            with self.transaction() as conn:
                conn.execute("ALTER TABLE arrays ADD COLUMN gpu_types TEXT")
        if "reason_log" not in have:  # failed jobs' reasons ended with their log's last line: move it apart
            with self.transaction() as conn:
                for job_id, reason in conn.execute("SELECT id, reason FROM jobs WHERE status = 'failed'").fetchall():
                    split = _FAILED_WITH_LINE.fullmatch(reason)
                    if split:
                        conn.execute("UPDATE jobs SET reason = ?, reason_log = ? WHERE id = ?",
                                     (*split.groups(), job_id))

    def _store_arrays_once(self) -> None:
        """A state file written when every task kept its array's whole spec gets each array's spec stored
        once (the ``arrays`` table) and its tasks' rows cut to their own part, losing nothing: an array
        whose tasks' specs are not all what its first task's makes of each index is left as it was
        (a task without a stored array spec keeps its whole spec). Done once per file, task by task."""
        if self.meta("arrays_stored_once") is not None:
            return
        with self.transaction() as conn:
            candidates = [int(array_id) for (array_id,) in conn.execute(
                "SELECT DISTINCT array_id FROM jobs WHERE array_id IS NOT NULL"
                " AND array_id NOT IN (SELECT id FROM arrays)").fetchall()]
            for array_id in candidates:
                first = conn.execute("SELECT user, spec, array_index FROM jobs WHERE array_id = ?"
                                     " ORDER BY array_index LIMIT 1", (array_id,)).fetchone()
                try:
                    shared = _array_spec_from_task(json.loads(first["spec"]), first["array_index"])
                    rows = [] if shared is None else _task_rows(conn, array_id, shared)
                except (ValueError, TypeError):  # a damaged row: its array is left as it is
                    continue
                if not rows:
                    continue
                conn.execute("INSERT INTO arrays (id, user, spec, text) VALUES (?, ?, ?, ?)",
                             (array_id, first["user"], json.dumps(shared), shared.get("array") or ""))
                conn.executemany("UPDATE jobs SET spec = ? WHERE id = ?", rows)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('arrays_stored_once', '1')")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """The connection a read goes through: the thread's snapshot if it holds one; the writing
        connection for the thread inside a write transaction (it reads what it has not committed
        yet); else a read connection of its own, which waits for no lock and no write."""
        held = getattr(self._local, "snapshot", None)
        if held is not None:
            yield held
            return
        if self._read_only or self._writer == threading.get_ident():
            with self._lock:
                yield self._conn
            return
        conn = self._reader()
        try:
            yield conn
        finally:
            if conn.in_transaction:  # a read that raised half-way
                conn.execute("ROLLBACK")
            self._give_back(conn)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read of this thread inside the block sees the file as it was at its first read (one
        read transaction of its own connection): for answers made of several queries (``/metrics``,
        what the optional resources keep), consistent without waiting for the state lock."""
        if (getattr(self._local, "snapshot", None) is not None or self._read_only
                or self._writer == threading.get_ident()):
            yield
            return
        conn = self._reader()
        conn.execute("BEGIN")
        self._local.snapshot = conn
        try:
            yield
        finally:
            self._local.snapshot = None
            conn.execute("COMMIT")
            self._give_back(conn)

    def _reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            if self._readers:
                return self._readers.pop()
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only=1")
        conn.execute("PRAGMA cache_size=-16384")  # 16 MiB each: the pages the API reads stay cached
        return conn

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if len(self._readers) < READERS_KEPT:
                self._readers.append(conn)
                return
        conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All writes inside happen at once or not at all; nests (inner blocks join the outer one)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._depth = 1
                self._writer = threading.get_ident()
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._patches, self._pending_rows = [], []  # what it wrote is read again (its writes counted)
                    if self._conn.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL)
                        self._conn.execute("ROLLBACK")
                    raise
                else:
                    self._patch_round_rows()
                    for write, row in self._pending_rows:  # the jobs it stored, as the next round would read them
                        self._inserted[row[0]] = (write, row)
                    self._pending_rows = []
                finally:
                    self._depth = 0
                    self._writer = None
            except (sqlite3.Error, OSError) as err:
                if is_no_space(err):
                    raise self.no_space(str(err)) from err
                raise

    def no_space(self, what: str = "") -> NoSpace:
        """Note that a write found the state directory out of space; the NoSpace to raise."""
        if self.full_since is None:
            self.full_since = time.time()
        return NoSpace(self.path.parent, what)

    def probe_space(self) -> bool:
        """Does a write fit in the state directory again (a file there, and new pages of the state
        file, rolled back)? Clears ``full_since`` when it does."""
        try:
            probe_file(self.path.parent)
            with self._lock:
                if self._depth:
                    return False
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('space-probe', zeroblob(?))",
                                       (PROBE_BYTES,))
                finally:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
        except (sqlite3.Error, OSError) as err:
            if is_no_space(err):
                return False
            raise
        self.full_since = None
        return True

    # jobs --------------------------------------------------------------------------------

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

    def insert_array(self, *, spec: dict, indices: tuple[int, ...], user: str, queue: str, priority: float,
                     kind: str, gpus: int, total_steps: int, submitted: float,
                     key: tuple[str, str, str] | None = None) -> tuple[int, list[int]]:
        """Store a job array in one transaction, all its tasks or none: (the array's id, its tasks' ids).
        The array's id is the next job id, left to no job; its tasks take the ids after it, in
        index order. ``spec``: the array's, stored once (``arrays``); each task's row keeps only its
        own part of task ``index``'s spec (``job_array.task_row_spec``). ``key`` as insert_job's,
        naming the array."""
        with self.transaction() as conn:
            last = conn.execute("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),"
                                " COALESCE((SELECT MAX(id) FROM jobs), 0))").fetchone()[0]
            array_id = int(last) + 1
            ids = [array_id + 1 + k for k in range(len(indices))]
            types = ",".join(spec.get("gpu_types") or ())
            conn.execute("INSERT INTO arrays (id, user, spec, text, gpu_types) VALUES (?, ?, ?, ?, ?)",
                         (array_id, user, json.dumps(spec), spec.get("array") or "", types))
            for job_id, index in zip(ids, indices):
                task = task_spec(spec, index)
                self._insert(conn, job_id, task, task["name"], user, queue, priority, kind, gpus, total_steps,
                             submitted, (array_id, index), stored=task_row_spec(task),
                             types=ARRAY_TYPES if types else "")
            self._add_after_edges(conn, array_id, spec.get("after"))  # once for its tasks
            if key is not None:
                conn.execute("INSERT INTO submit_keys (user, key, job_id, body) VALUES (?, ?, ?, ?)",
                             (key[0], key[1], array_id, key[2]))
            return array_id, ids

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
            " reason, submitted, elastic, after, array_id, array_index, notify_pending, cpus, memory_gb) VALUES (?, ?,"
            " ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 'waiting for its first round', ?, ?, ?, ?, ?, ?, ?, ?)",
            (job_id, name, user, queue, priority, kind, gpus, allowed, total_steps,
             json.dumps(spec if stored is None else stored), submitted,
             elastic, after, array_id, array_index, int(bool(spec.get("notify"))), spec.get("cpus"),
             spec.get("memory_gb")),
        )
        job_id = int(cursor.lastrowid)
        self._wrote((job_id,))
        self._pending_rows.append((self._writes, _inserted_round_row(
            id=job_id, name=name, user=user, queue=queue, priority=priority, kind=kind, gpus=gpus, gpu_types=allowed,
            total_steps=total_steps, submitted=submitted, elastic=elastic, after=after, array_id=array_id,
            cpus=spec.get("cpus"), memory_gb=spec.get("memory_gb"))))
        self.add_event(submitted, job_id, "submit", f"{name} by {user}")
        return job_id

    def _record(self, row: sqlite3.Row) -> JobRecord:
        """A ``jobs`` row as a record, a task's spec put together with its array's (parsed once)."""
        array_id = row["array_id"] if "array_id" in row.keys() else None
        return job_record(row, None if array_id is None else self.array_spec(array_id))

    def array_spec(self, array_id: int) -> dict | None:
        """Array ``array_id``'s spec as stored once, parsed (None: none is: no such array, or one an older
        apportion stored whose tasks keep their whole specs). Kept parsed for the next call, the most
        recently read arrays' up to ARRAY_SPEC_CACHE_CHARS characters of JSON: a round or a list that
        reads every task of an array parses its spec once. Shared by every caller: never change it."""
        with self._array_specs_lock:
            if array_id in self._array_specs:
                self._array_specs.move_to_end(array_id)
                return self._array_specs[array_id][0]
        with self._read() as conn:
            row = (conn.execute("SELECT spec FROM arrays WHERE id = ?", (array_id,)).fetchone()
                   if self._has_arrays else None)
        spec = json.loads(row[0]) if row is not None else None
        if self._writer == threading.get_ident():  # what a transaction read may yet be rolled back (its id used again)
            return spec
        with self._array_specs_lock:
            chars = len(row[0]) if row is not None else 0
            self._array_specs[array_id] = (spec, chars)
            self._array_spec_chars += chars
            while self._array_spec_chars > ARRAY_SPEC_CACHE_CHARS and len(self._array_specs) > 1:
                _, (_, dropped) = self._array_specs.popitem(last=False)
                self._array_spec_chars -= dropped
            return spec

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
                    f" AND {_IS_ACTIVE})", chunk)

    def array_tasks(self, array_id: int) -> list[JobRecord]:
        """The tasks of array ``array_id``, by index (none: it is no array)."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM jobs WHERE array_id = ? ORDER BY array_index",
                                      (array_id,)).fetchall()
        return [self._record(r) for r in rows]

    def arrays_of(self, ids: list[int]) -> dict[int, tuple[str, dict[str, int]]]:
        """For each of ``ids`` that is an array: its user and how many of its tasks are in each status."""
        found: dict[int, tuple[str, dict[str, int]]] = {}
        with self._read() as conn:
            for first in range(0, len(ids), 500):
                chunk = ids[first:first + 500]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT array_id, MIN(user), status, COUNT(*) FROM jobs WHERE array_id IN"
                                          f" ({marks}) GROUP BY array_id, status", chunk).fetchall()
                for array_id, user, status, count in rows:
                    found.setdefault(int(array_id), (user, {}))[1][status] = int(count)
        return found

    def array_texts(self, array_ids: list[int]) -> dict[int, str]:
        """The ``array`` text (``0-15%4``) each of ``array_ids`` was submitted with: read from the
        ``arrays`` table, or for an array whose tasks keep their whole specs, from its first task,
        whose id follows the array's (insert_array): each array costs one key lookup."""
        found: dict[int, str] = {}
        with self._read() as conn:
            for first in range(0, len(array_ids), 500):
                chunk = array_ids[first:first + 500]
                if self._has_array_texts:
                    rows = conn.execute(f"SELECT id, text FROM arrays WHERE id IN ({','.join('?' * len(chunk))})"
                                        " AND text IS NOT NULL", chunk).fetchall()
                    found.update({int(array_id): text for array_id, text in rows})
            array_ids = [i for i in array_ids if i not in found]
            for first in range(0, len(array_ids), 500):
                chunk = [i + 1 for i in array_ids[first:first + 500]]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT array_id, json_extract(spec, '$.array') FROM jobs WHERE id IN"
                                          f" ({marks}) AND array_id = id - 1", chunk).fetchall()
                found.update({int(array_id): text or "" for array_id, text in rows})
        return found

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
            cursor = conn.execute(f"SELECT id, attempt_live FROM jobs WHERE {which} AND {_IS_ACTIVE} ORDER BY id",
                                  (job_id,))
            cursor.row_factory = None
            rows = cursor.fetchall()
            if not rows:
                return [], []
            conn.execute(f"UPDATE jobs SET status = 'cancelled', stop = 'cancel', term_at = ?, finished = ?, reason = ?"
                         f" WHERE {which} AND {_IS_ACTIVE} AND attempt_live", (now, now, f"cancelled by {by}; stopping",
                                                                                 job_id))
            conn.execute(f"UPDATE jobs SET status = 'cancelled', slots = '', gpu_type = NULL, partner = NULL,"
                         f" finished = ?, reason = ? WHERE {which} AND {_IS_ACTIVE} AND NOT attempt_live",
                         (now, f"cancelled by {by}", job_id))
            ids = [int(i) for i, _ in rows]
            conn.executemany("INSERT INTO events (time, job_id, event, detail) VALUES (?, ?, 'cancel', ?)",
                             [(now, i, f"by {by}") for i in ids])
            self._wrote(ids)
            return ids, [int(i) for i, live in rows if live]

    def array_size(self, array_id: int) -> int:
        """How many tasks array ``array_id`` has (0: it is no array)."""
        with self._read() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM jobs WHERE array_id = ?", (array_id,)).fetchone()[0])

    def active_jobs_of(self, user: str) -> int:
        """How many of ``user``'s jobs are active."""
        with self._read() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM jobs WHERE user = ? AND {_IS_ACTIVE}",
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

    def job(self, job_id: int) -> JobRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._record(row) if row is not None else None

    def jobs(self) -> list[JobRecord]:
        """Every job, by id."""
        return self._select()

    def active_jobs(self) -> list[JobRecord]:
        """Jobs the scheduler still looks after: waiting or running, or with a live attempt."""
        return self._select(f"{_IS_ACTIVE} OR attempt_live")

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
        sql = (f"SELECT {', '.join(_COLUMN_SQL.get(c, c) for c in columns)} FROM jobs"
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
            kept = RoundRows(_ROUND_NAMES, self._round_rows_where(f"{_IS_ACTIVE} OR attempt_live"))
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
                f"SELECT EXISTS (SELECT 1 FROM jobs WHERE {_IS_ACTIVE} AND NOT attempt_live AND slots = '')"
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

    def attempt_counts(self) -> dict[str, int]:
        """Attempts by how they ended ('' for those not ended), over every run of this state file."""
        with self._read() as conn:
            rows = conn.execute("SELECT COALESCE(how, ''), COUNT(*) FROM attempts GROUP BY how").fetchall()
        return {how: int(n) for how, n in rows}

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

    # throughputs -------------------------------------------------------------------------

    def throughputs(self) -> dict[tuple[str, str, int], tuple[float, int]]:
        with self._read() as conn:
            rows = conn.execute("SELECT kind, gpu_type, gpus, steps_per_s, samples FROM throughputs").fetchall()
        return {(k, t, g): (r, n) for k, t, g, r, n in rows}

    def put_throughput(self, kind: str, gpu_type: str, gpus: int, steps_per_s: float, samples: int,
                       now: float) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO throughputs VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, gpu_type, gpus) DO UPDATE"
                " SET steps_per_s = excluded.steps_per_s, samples = excluded.samples, updated = excluded.updated",
                (kind, gpu_type, gpus, steps_per_s, samples, now),
            )

    # finished jobs' durations ------------------------------------------------------------

    def put_duration(self, job_id: int, *, user: str, name: str, queue: str, gpus: int, submitted: float,
                     finished: float, gpu_s: float) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO durations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (job_id, user, name, queue, gpus, submitted, finished, gpu_s))

    def durations(self) -> list[DurationRecord]:
        """Every finished job's GPU time, in the order they finished."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM durations ORDER BY finished, job_id").fetchall()
        return [record(DurationRecord, r) for r in rows]

    # jobs' speeds against their CPU cores ---------------------------------------------------

    def put_core_speed(self, job_id: int, cores_per_gpu: float, steps: float, seconds: float, now: float) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO core_speeds VALUES (?, ?, ?, ?, ?)",
                         (job_id, cores_per_gpu, steps, seconds, now))

    def core_speeds(self) -> list[tuple[int, float, float, float]]:
        """(job id, cores per GPU, steps, seconds) of every share of cores a job was measured at."""
        with self._read() as conn:
            cursor = conn.execute("SELECT job_id, cores_per_gpu, steps, seconds FROM core_speeds "
                                        "ORDER BY job_id, cores_per_gpu")
            cursor.row_factory = None
            return cursor.fetchall()

    # elastic jobs' measurements ---------------------------------------------------------

    def put_elastic_step(self, job_id: int, gpu_type: str, gpus: int, nodes: int, local_batch: float, step_s: float,
                         sync_s: float, samples: int, now: float) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO elastic_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (job_id, gpu_type, gpus, nodes, local_batch, step_s, sync_s, samples, now))

    def elastic_steps(self) -> list[ElasticStepRecord]:
        """Every elastic job's measured steps, one row per (job, type, replicas, nodes, micro-batch)."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM elastic_steps ORDER BY job_id, gpu_type, gpus").fetchall()
        return [record(ElasticStepRecord, r) for r in rows]

    def put_elastic_model(self, job_id: int, noise_scale: float | None, params: dict, now: float) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO elastic_models VALUES (?, ?, ?, ?)",
                         (job_id, noise_scale, json.dumps(params, sort_keys=True), now))

    def elastic_models(self) -> dict[int, tuple[float | None, dict]]:
        """job id -> (its latest noise scale or None, {gpu_type: fitted step-time parameters})."""
        with self._read() as conn:
            rows = conn.execute("SELECT job_id, noise_scale, params FROM elastic_models").fetchall()
        return {int(j): (phi, json.loads(params)) for j, phi, params in rows}

    # the dashboard's samples ------------------------------------------------------------

    def put_sample(self, time: float, queued: int, running: int, busy: dict[str, int],
                   keep: list[float] | None = None) -> None:
        """Store one sample of the cluster; ``keep``: the times of the samples to keep, when the
        series was just thinned (the others are deleted in the same transaction)."""
        with self.transaction() as conn:
            conn.execute("INSERT INTO samples (time, queued, running, busy) VALUES (?, ?, ?, ?)",
                         (time, queued, running, json.dumps(busy, sort_keys=True)))
            if keep is not None:
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS kept_samples (time REAL)")
                conn.execute("DELETE FROM kept_samples")
                conn.executemany("INSERT INTO kept_samples VALUES (?)", [(t,) for t in keep])
                conn.execute("DELETE FROM samples WHERE time NOT IN (SELECT time FROM kept_samples)")

    def samples(self) -> list[tuple[float, int, int, dict[str, int]]]:
        """The dashboard's samples, oldest first: (time, queued, running, {gpu_type: busy})."""
        with self._read() as conn:
            rows = conn.execute("SELECT time, queued, running, busy FROM samples ORDER BY id").fetchall()
        return [(t, q, r, json.loads(busy)) for t, q, r, busy in rows]

    # accounting ----------------------------------------------------------------------------

    def accounting_columns(self) -> tuple[dict[str, tuple], dict[str, tuple]]:
        """What ``apportion history`` counts from, as columns (name -> tuple over rows), read in one
        snapshot: every job (``ACCOUNTING_JOB_COLUMNS``, by id) and every attempt
        (``ACCOUNTING_ATTEMPT_COLUMNS``). A column or table a file written by an older apportion
        lacks comes back filled with its default."""
        with self._lock:
            began = not self._conn.in_transaction
            if began:
                self._conn.execute("BEGIN")  # one snapshot of both tables; a reader blocks no writer (WAL)
            try:
                jobs = self._columns("jobs", ACCOUNTING_JOB_COLUMNS, "id")
                attempts = self._columns("attempts", ACCOUNTING_ATTEMPT_COLUMNS, "job_id, attempt")
            finally:
                if began:
                    self._conn.execute("COMMIT")
        return jobs, attempts

    def _columns(self, table: str, wanted: dict[str, object], order: str) -> dict[str, tuple]:
        have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            return {name: () for name in wanted}
        chosen = ", ".join(name if name in have else "NULL" for name in wanted)
        cursor = self._conn.execute(f"SELECT {chosen} FROM {table} ORDER BY {order}")
        cursor.row_factory = None
        columns = list(zip(*cursor.fetchall())) or [()] * len(wanted)
        return {name: (column if name in have else (default,) * len(column))
                for (name, default), column in zip(wanted.items(), columns)}

    def add_tables(self, schema: str, added: dict[str, dict[str, str]] | None = None) -> None:
        """The tables of a family a module of its own keeps (its SQL with them): ``schema``, its CREATE
        statements, all IF NOT EXISTS; ``added``, table -> the columns added since, each with its definition,
        that a file written by an older apportion gains (with their defaults)."""
        if self._read_only:
            return
        self._conn.executescript(schema)
        with self.transaction() as conn:
            for table, columns in (added or {}).items():
                present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                for name, definition in columns.items():
                    if name not in present:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        """The rows of one query, as plain tuples (for the tables a module of its own keeps: ``add_tables``)."""
        with self._read() as conn:
            cursor = conn.execute(sql, params)
            cursor.row_factory = None
            return cursor.fetchall()

    # events and meta ---------------------------------------------------------------------

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

    # attempts ----------------------------------------------------------------------------

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

    # users and credentials ----------------------------------------------------------------

    def put_user(self, name: str, *, admin: bool, salt: str, digest: str, kdf: str, now: float) -> int:
        """Add user ``name`` (or give an existing one a new credential and role); returns its id."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO users (name, admin, salt, digest, kdf, created) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET admin = excluded.admin, salt = excluded.salt,"
                " digest = excluded.digest, kdf = excluded.kdf, created = excluded.created, revoked = NULL",
                (name, int(admin), salt, digest, kdf, now))
            self.add_event(now, None, "user", f"{name}: new credential" + (" (admin)" if admin else ""))
            return int(conn.execute("SELECT id FROM users WHERE name = ?", (name,)).fetchone()[0])

    def rehash_user(self, user_id: int, old_digest: str, *, salt: str, digest: str, kdf: str) -> bool:
        """Store user ``user_id``'s same credential under a new hash, unless it changed meanwhile."""
        with self.transaction() as conn:
            return bool(conn.execute("UPDATE users SET salt = ?, digest = ?, kdf = ? WHERE id = ? AND digest = ?",
                                     (salt, digest, kdf, user_id, old_digest)).rowcount)

    def revoke_user(self, name: str, now: float) -> bool:
        """End user ``name``'s credential; False when there is no such user with a working one."""
        with self.transaction() as conn:
            changed = conn.execute("UPDATE users SET revoked = ? WHERE name = ? AND revoked IS NULL",
                                   (now, name)).rowcount
            if changed:
                self.add_event(now, None, "user", f"{name}: credential revoked")
        return bool(changed)

    def user(self, name: str) -> UserRecord | None:
        """User ``name`` with its credential's hash, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
        return _user(row) if row is not None else None

    def user_by_id(self, user_id: int) -> UserRecord | None:
        """User ``user_id`` with its credential's hash, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM users WHERE id = ?", (user_id,)).fetchone()
        return _user(row) if row is not None else None

    def users(self) -> list[UserRecord]:
        """Every user ever added (revoked ones too), by name; without their hashes."""
        with self._read() as conn:
            rows = conn.execute("SELECT id, name, admin, created, revoked FROM users ORDER BY name").fetchall()
        return [UserRecord(r["id"], r["name"], bool(r["admin"]), r["created"], r["revoked"]) for r in rows]

    def has_users(self) -> bool:
        """Has any user ever been added? (Then the server asks every caller for a credential.)"""
        with self._read() as conn:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM users)").fetchone()[0] == 1

    def put_attempt_credential(self, job_id: int, attempt: int, digest: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO attempt_credentials VALUES (?, ?, ?)", (job_id, attempt, digest))

    def attempt_credential(self, job_id: int, attempt: int) -> str | None:
        """The digest of the credential of attempt ``attempt`` of job ``job_id``, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT digest FROM attempt_credentials WHERE job_id = ? AND attempt = ?",
                                     (job_id, attempt)).fetchone()
        return row[0] if row is not None else None


ARRAY_SPEC_CACHE_CHARS = 32 * 2**20  # array specs kept parsed (StateStore.array_spec): a few of the largest
_ROUND_NAMES = (
    "id", "status", "reason", "kind", "gpus", "gpu_types", "priority", "total_steps", "steps_done", "submitted",
    "started", "live", "pid", "stop", "slots", "gpu_type", "lease_end", "run_s", "service_gpu_s", "service_by_type",
    "accounted_at", "attempt", "attempt_started", "contact_at", "queue", "user", "partner", "shared_by_type", "move_to",
    "name", "elastic", "batch_size", "batch_log", "after", "array_id", "cpus", "memory_gb",
)
_ADDED_COLUMNS = {"attempt_live": "INTEGER NOT NULL DEFAULT 0", "partner": "INTEGER",
                  "shared_by_type": "TEXT NOT NULL DEFAULT '{}'", "move_to": "TEXT NOT NULL DEFAULT ''",
                  "elastic": "TEXT NOT NULL DEFAULT ''",
                  "batch_size": "INTEGER", "batch_log": "TEXT NOT NULL DEFAULT ''", "heard_at": "REAL",
                  "hangs": "INTEGER NOT NULL DEFAULT 0", "reason_log": "TEXT NOT NULL DEFAULT ''",
                  "after": "TEXT NOT NULL DEFAULT ''", "notify_pending": "INTEGER NOT NULL DEFAULT 0",
                  "array_id": "INTEGER", "array_index": "INTEGER",
                  "data_stall": "REAL", "fetch_stall": "REAL", "preprocess_stall": "REAL",
                  "cpus": "REAL", "memory_gb": "REAL"}
# the round columns whose values update_jobs can give the kept round rows as SQLite reads them back: not
# status or live (they decide whether a row is kept at all); name -> how SQLite stores a value there
_PATCHABLE = {
    "reason": str, "slots": str, "gpu_type": str, "partner": int, "lease_end": float, "stop": str, "move_to": str,
    "batch_size": int, "run_s": float, "service_gpu_s": float, "service_by_type": str, "shared_by_type": str,
    "accounted_at": float, "steps_done": int, "attempt": int,
}


def _inserted_round_row(**stored) -> tuple:
    """The round-table row of a job just stored with these values (the rest its columns' defaults), as
    SQLite reads it back: REAL columns give floats, INTEGER ones ints."""
    real = {"priority", "submitted", "cpus", "memory_gb"}
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


_ROUND_STATUS, _ROUND_LIVE = _ROUND_NAMES.index("status"), _ROUND_NAMES.index("live")
ACCOUNTING_JOB_COLUMNS = {  # name -> the value an older file that lacks it gets
    "id": 0, "name": "", "user": "", "queue": "", "status": "", "reason": "", "reason_log": "", "exit_code": None,
    "submitted": 0.0, "started": None, "finished": None, "attempt": 0, "preemptions": 0, "retries": 0, "hangs": 0,
}
ACCOUNTING_ATTEMPT_COLUMNS = {"job_id": 0, "attempt": 0, "gpu_type": None, "slots": "", "started": 0.0, "ended": None}
ARRAY_TYPES = ","  # a task's gpu_types column when its array's are kept once (arrays.gpu_types): no type's name
# the columns read as other than themselves: a task's allowed types from its array (a reader that missed this
# would see ARRAY_TYPES, types no slot has, and place the task nowhere: never on a type it may not use)
_COLUMN_SQL = {"gpu_types": f"CASE WHEN jobs.gpu_types = '{ARRAY_TYPES}' THEN COALESCE((SELECT arrays.gpu_types FROM"
                            f" arrays WHERE arrays.id = jobs.array_id), jobs.gpu_types) ELSE jobs.gpu_types END AS gpu_types",
               "live": "attempt_live AS live"}
_ROUND_COLUMNS = ", ".join(_COLUMN_SQL.get(name, name) for name in _ROUND_NAMES)
_FAILED_WITH_LINE = re.compile(r"(.* on attempt \d+, after \d+ retr(?:y|ies)): (.*)", re.DOTALL)


def parsed_spec(spec: str | dict) -> object:
    """A spec as ``specs_of`` gives it, parsed (ValueError: its JSON text cannot be read)."""
    return spec if isinstance(spec, dict) else json.loads(spec)


def _array_spec_from_task(task: object, index: object) -> dict | None:
    """The array spec ``task`` (task ``index``'s whole spec, as an older apportion stored it) was made
    from by ``job_array.task_spec``; None when it is not one that function makes."""
    if not isinstance(task, dict) or not isinstance(index, int):
        return None
    name, directory = task.get("name"), task.get("checkpoint_dir")
    suffix = f"[{index}]"
    if not isinstance(name, str) or not name.endswith(suffix):
        return None
    shared = {**task, "name": name[:-len(suffix)]}
    if directory:
        if not isinstance(directory, str) or Path(directory).name != str(index):
            return None
        shared["checkpoint_dir"] = str(Path(directory).parent)
    return shared


def _task_rows(conn: sqlite3.Connection, array_id: int, shared: dict) -> list[tuple[str, int]]:
    """(the row's own part of its spec, id) for each task of array ``array_id`` whose stored whole spec
    is what ``shared`` makes of its index; [] when one is not (the array is then left as it is).
    Read task by task: an array of large specs is never in memory at once."""
    rows: list[tuple[str, int]] = []
    for job_id, text, index in conn.execute("SELECT id, spec, array_index FROM jobs WHERE array_id = ?", (array_id,)):
        task = task_spec(shared, index) if isinstance(index, int) else None
        if task is None or json.loads(text) != task:
            return []
        rows.append((json.dumps(task_row_spec(task)), job_id))
    return rows


def _user(row: sqlite3.Row) -> UserRecord:
    return UserRecord(row["id"], row["name"], bool(row["admin"]), row["created"], row["revoked"],
                      CredentialHash(row["salt"], row["digest"], row["kdf"]))
