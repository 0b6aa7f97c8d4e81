"""Job arrays: each array's spec stored once (its tasks' rows keep only their own part), read back
parsed once while kept; an array's tasks and their counts."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from apportion.serve.jobs.job_array import task_row_spec, task_spec
from apportion.serve.jobs.records import JobRecord
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.jobs import ARRAY_TYPES
from apportion.serve.store.schema import TableFamily

ARRAY_SPEC_CACHE_CHARS = 32 * 2**20  # array specs kept parsed (StateStore.array_spec): a few of the largest
SCHEMA = """
CREATE TABLE IF NOT EXISTS arrays (  -- each job array's spec, stored once: its tasks' rows keep only their own part
    id INTEGER PRIMARY KEY,             -- the array's id, held by no job: the one its tasks name
    user TEXT NOT NULL,
    spec TEXT NOT NULL,                 -- the array's JobSpec as JSON: a task's is task_spec's of it, its row's over it
    text TEXT,                          -- its `array` (0-15%4), read each round without the spec
    gpu_types TEXT                      -- its tasks' allowed types, comma-separated, where their rows say ARRAY_TYPES
);
"""


def _migrate(store) -> None:
    """An arrays table from before it kept the ``array`` text and its tasks' types apart gains them;
    a file from before arrays were stored once gets each stored once (``_store_arrays_once``)."""
    with store._read() as conn:
        arrays = {row[1] for row in conn.execute("PRAGMA table_info(arrays)")}
    if "text" not in arrays:  # an arrays table from before it kept the `array` text apart
        with store.transaction() as conn:
            conn.execute("ALTER TABLE arrays ADD COLUMN text TEXT")
            conn.execute("UPDATE arrays SET text = COALESCE(json_extract(spec, '$.array'), '')")
    if "gpu_types" not in arrays:  # and its tasks' types: their rows keep them, as they were
        with store.transaction() as conn:
            conn.execute("ALTER TABLE arrays ADD COLUMN gpu_types TEXT")
    store._store_arrays_once()


ARRAYS = TableFamily("arrays", SCHEMA, _migrate)


class ArrayTables(StoreConnection):
    """The ``arrays`` table, and the jobs of an array (a part of ``StateStore``)."""

    def _start_arrays(self) -> None:
        # array id -> its parsed spec (None: no spec stored once), the most recently read first; an
        # array's spec never changes once stored, so each is parsed once while it is kept
        self._array_specs: OrderedDict[int, tuple[dict | None, int]] = OrderedDict()  # (spec, its JSON's length)
        self._array_spec_chars = 0  # the JSON characters of the specs kept: bounded by ARRAY_SPEC_CACHE_CHARS
        self._array_specs_lock = threading.Lock()
        self._has_arrays = self._has_array_texts = True
        if self._read_only:  # an older file may lack them
            arrays = {row[1] for row in self._conn.execute("PRAGMA table_info(arrays)")}
            self._has_arrays, self._has_array_texts = bool(arrays), "text" in arrays

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

    def array_size(self, array_id: int) -> int:
        """How many tasks array ``array_id`` has (0: it is no array)."""
        with self._read() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM jobs WHERE array_id = ?", (array_id,)).fetchone()[0])


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
