"""The dashboard's cluster over time (views/history.py): one sample a minute or so, bounded by halving."""

from __future__ import annotations

import json

from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (  -- the dashboard's cluster over time (history.py), bounded by halving
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    queued INTEGER NOT NULL,            -- jobs waiting
    running INTEGER NOT NULL,
    busy TEXT NOT NULL DEFAULT '{}'     -- {gpu_type: busy slots}
);
"""
SAMPLES = TableFamily("samples", SCHEMA)


class SampleTables(StoreConnection):
    """The ``samples`` table (a part of ``StateStore``)."""

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
