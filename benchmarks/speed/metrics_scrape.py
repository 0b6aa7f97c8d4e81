"""How long a GET /metrics takes on a server holding many jobs: prints the scrape's p50 and max.

Fills a temporary state file with ``--jobs`` jobs (a tenth finished, a tenth running on the
slots, the rest queued; 50 users, 10 queues, every job with one ended attempt), then scrapes
through the HTTP API (FastAPI's TestClient over a fake executor) ``--scrapes`` times.

    python benchmarks/speed/metrics_scrape.py --jobs 10000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


def fill(store: StateStore, jobs: int, slots: int, now: float) -> None:
    with store.transaction():
        for i in range(jobs):
            spec = {"name": f"j{i}", "command": "train", "total_steps": 100}
            job_id = store.insert_job(spec=spec, name=f"j{i}", user=f"user{i % 50}", queue=f"q{i % 10}",
                                      priority=1.0, kind="j", gpus=1, total_steps=100, submitted=now - 3600)
            store.attempt_started(job_id, 1, now - 3000, "cpu", "", None)
            if i % 10 == 0:
                store.update_job(job_id, status="completed", finished=now - 100, service_gpu_s=500.0)
                store.attempt_ended(job_id, 1, now - 100, 100, "completed")
            elif i % 10 == 1 and i // 10 < slots:
                store.update_job(job_id, status="running", attempt_live=True, slots=f"cpu:{i // 10}", gpu_type="cpu",
                                 accounted_at=now - 60, service_gpu_s=100.0)
            else:
                store.attempt_ended(job_id, 1, now - 200, 10, "preempted")
                store.update_job(job_id, status="preempted", preemptions=1, service_gpu_s=200.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="a few jobs, seconds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.slots, args.scrapes = 200, 20, 3
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        store = StateStore(state_dir / "state.db")
        fill(store, args.jobs, args.slots, time.time())
        scheduler = Scheduler(store, FakeExecutor(state_dir), parse_slots(f"cpu:{args.slots}"), Las(),
                              ServeConfig(state_dir=state_dir))
        client = TestClient(create_app(scheduler))
        times = []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            answer = client.get("/metrics")
            times.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200
        print(f"{args.jobs:,} jobs, {args.slots} slots: GET /metrics p50 {statistics.median(times):.1f} ms, "
              f"max {max(times):.1f} ms over {args.scrapes} scrapes ({len(answer.content):,} bytes)")


if __name__ == "__main__":
    main()
