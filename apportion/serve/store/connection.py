"""The state file's connections: one that writes, shared by the HTTP threads and the scheduler
thread behind a lock; reads through connections of their own (WAL mode: a reader never waits for a
write transaction, and sees what was committed), so that a long round or a big write delays no
credential check and no read of the API. Every table family reads and writes through these: no
module of the server opens a connection of its own (but untrusted_state.py, for a file that is
not the server's).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from apportion.serve.base.private import private_dir, private_file, tighten
from apportion.serve.base.space import PROBE_BYTES, NoSpace, is_no_space, probe_file
from apportion.serve.store.schema import TableFamily

READERS_KEPT = 8  # read connections kept open between reads (more are opened while many read at once)


class StoreConnection:
    """The connections, transactions and snapshots every table family of ``StateStore`` uses."""

    def _open(self, path: str | Path, read_only: bool) -> None:
        """Open the state file: ``read_only`` to read an existing one only (a replay), changing nothing,
        not even its schema (sqlite3.Error if it is missing or not a state file)."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        self.full_since: float | None = None  # a write found the state directory out of space then (space.py)
        self._writer: int | None = None  # the thread inside a write transaction, which reads what it wrote
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
            return
        private_dir(self.path.parent)
        private_file(self.path)  # the jobs' specs (their env) and the credentials' hashes: owner-only
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: every round reads all active jobs' rows
        self._conn.execute("PRAGMA foreign_keys=ON")

    def _tighten(self) -> None:
        for suffix in ("-wal", "-shm"):  # SQLite gives them the file's mode; an older state dir's may be wider
            tighten(Path(f"{self.path}{suffix}"), 0o600)

    def _create(self, families: Iterable[TableFamily]) -> None:
        """Every family's schema (idempotent: every statement is IF NOT EXISTS), then each one's migration."""
        families = list(families)
        self._conn.executescript("".join(family.schema for family in families))
        for family in families:
            if family.migrate is not None:
                family.migrate(self)

    def add_family(self, family: TableFamily) -> None:
        """Keep ``family``'s tables in this open store too (for a package whose tables are not in
        ``SCHEMA_FAMILIES``): its schema and migration, as at a start. Nothing on a read-only store."""
        if not self._read_only:
            self._create([family])

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
        a resource's views), consistent without waiting for the state lock."""
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
                    self._rolled_back()
                    if self._conn.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL)
                        self._conn.execute("ROLLBACK")
                    raise
                else:
                    self._committed()
                finally:
                    self._depth = 0
                    self._writer = None
            except (sqlite3.Error, OSError) as err:
                if is_no_space(err):
                    raise self.no_space(str(err)) from err
                raise

    def _committed(self) -> None:
        """Called under the lock once a transaction committed (the jobs family keeps its round rows)."""

    def _rolled_back(self) -> None:
        """Called under the lock as a transaction rolls back."""

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

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        """The rows of one query, as plain tuples (for the tables a package above the store keeps: a resource's, budgets)."""
        with self._read() as conn:
            cursor = conn.execute(sql, params)
            cursor.row_factory = None
            return cursor.fetchall()
