"""What the server measured of jobs, kept across restarts: steps/s per kind, slot type and size
(throughputs), finished jobs' GPU time (durations), steps at each share of CPU cores (core_speeds),
elastic jobs' measured steps and fitted models (elastic_steps, elastic_models)."""

from __future__ import annotations

import json

from apportion.serve.jobs.records import DurationRecord, ElasticStepRecord, record
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily, add_columns

SCHEMA = """
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
    gpu_s REAL NOT NULL,                -- GPU-seconds at its fastest speed: steps × GPUs ÷ fastest steps/s
    estimated_gpu_s REAL                -- its job file's estimated_duration_s × GPUs, in the same unit; NULL: none
);
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
CREATE TABLE IF NOT EXISTS core_speeds (  -- each job's steps at each share of CPU cores it ran with (core_speeds.py)
    job_id INTEGER NOT NULL,
    cores_per_gpu REAL NOT NULL,
    steps REAL NOT NULL,
    seconds REAL NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (job_id, cores_per_gpu)
);
"""


def _migrate(store) -> None:
    """A state file written by an older apportion gains the columns added since (its jobs had no estimates)."""
    with store.transaction() as conn:
        add_columns(conn, "durations", {"estimated_gpu_s": "REAL"})


MEASUREMENTS = TableFamily("measurements", SCHEMA, _migrate)


class MeasurementTables(StoreConnection):
    """The tables of what jobs were measured at (a part of ``StateStore``)."""

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
                     finished: float, gpu_s: float, estimated_gpu_s: float | None = None) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO durations (job_id, user, name, queue, gpus, submitted, finished, gpu_s,"
                         " estimated_gpu_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (job_id, user, name, queue, gpus, submitted, finished, gpu_s, estimated_gpu_s))

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
