"""End to end on CPU slots: an elastic job rescaled 1 → 2 → 1 replicas by the goodput policy
through the real serve path (HTTP API, local executor, one gloo process a slot).

Two slots. The elastic job (examples/elastic.yaml's, shorter) starts beside a fixed-size job,
on one slot; when that job ends, the policy gives it both slots (every replica stops at one
checkpoint, two start); when a second fixed-size job arrives, it goes back to one. The two
fixed-size jobs step until the test opens their gate. The job must end with exactly its steps
and the examples they hold, whatever the number of replicas each step ran on.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the elastic job is a PyTorch example")

import uvicorn  # noqa: E402

from apportion.executors.local import LocalExecutor  # noqa: E402
from apportion.policies import make_policy  # noqa: E402
from apportion.serve.http.api import create_app  # noqa: E402
from apportion.serve.jobs.records import JobRecord  # noqa: E402
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig  # noqa: E402
from apportion.serve.app.server import listen  # noqa: E402
from apportion.serve.base.slots import parse_slots  # noqa: E402
from apportion.serve.store.state import StateStore  # noqa: E402
from serve_helpers import REPO, wait_for  # noqa: E402

GATED_JOB = Path(__file__).resolve().parent / "gated_job.py"
# enough steps that the job is still far from its end when it first reports from two slots, even on a
# loaded machine (where that report came at step 320-350 of 360, and the job could end before going back)
STEPS, BATCH = 600, 32


class InProcessServer:
    """The scheduler and its API in threads, over the local executor (real processes)."""

    def __init__(self, state_dir: Path, policy) -> None:
        self.store = StateStore(state_dir / "state.db")
        self.executor = LocalExecutor(state_dir)
        self.socket = listen("127.0.0.1", 0)
        url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = ServeConfig(state_dir=state_dir, server_url=url, round_s=2.0, grace_s=30.0, tick_s=0.05,
                             fill_gap_s=0.2, cpu_threads=2)
        self.scheduler = Scheduler(self.store, self.executor, parse_slots("cpu:2"), policy, config)
        self.stop_event = threading.Event()
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.scheduler), log_level="warning",
                                                    access_log=False, lifespan="off"))
        self.threads = [threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True),
                        threading.Thread(target=self.scheduler.run, args=(self.stop_event,), daemon=True)]
        for thread in self.threads:
            thread.start()

    def submit(self, body: dict) -> int:
        return self.scheduler.submit({"workdir": str(REPO), **body, "user": "ann"}, "ann")

    def job(self, job_id: int) -> JobRecord:
        return self.store.job(job_id)

    def stop(self) -> None:
        self.server.should_exit = True
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for attempt in self.executor.scan():
            self.executor.kill_attempt(attempt)


ENDED = ("completed", "failed")  # a gated job exits 0 short of its steps: it ends failed, saying so


def gated(name: str, gate: Path) -> dict:
    return {"name": name, "command": [sys.executable, str(GATED_JOB), str(gate)], "total_steps": 1_000_000}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The whole scenario, once; what the tests check is read from the state file and the logs."""
    work = tmp_path_factory.mktemp("elastic-serve")
    server = InProcessServer(work / "state", make_policy("goodput", restart_cost_s=1.0))
    gate_b, gate_c = work / "b.open", work / "c.open"
    started = time.monotonic()
    try:
        with server.scheduler.state.lock:  # both arrive before a round: no round sees the elastic job alone
            elastic = server.submit({
                "name": "elastic", "total_steps": STEPS,
                "command": [sys.executable, "examples/train_elastic.py", "--seed", "0", "--step-s", "0.03"],
                "elastic": {"min_gpus": 1, "max_gpus": 2, "batch_size": BATCH, "lr_rule": "sqrt"},
            })
            first = server.submit(gated("b", gate_b))

        def on(slots: int, after_step: int):
            row = server.job(elastic)
            return (row.attempt_live and row.contact_at is not None and len(row.slot_list) == slots
                    and row.steps_done >= after_step)

        wait_for(lambda: on(1, 10) and any(r.gpus == 1 for r in server.store.elastic_steps()), 60,
                 "the elastic job to report its speed on one slot beside job b")
        gate_b.touch()  # b ends: the policy gives the elastic job both slots
        wait_for(lambda: server.job(first).status in ENDED, 30, "job b to end")
        wait_for(lambda: on(2, 0) and any(r.gpus == 2 for r in server.store.elastic_steps()), 60,
                 "the elastic job to report its speed on two slots")
        second = server.submit(gated("c", gate_c))  # c arrives: back to one slot each
        wait_for(lambda: server.job(elastic).status == "completed", 120, "the elastic job to finish")
        gate_c.touch()
        wait_for(lambda: server.job(second).status in ENDED, 30, "job c to end")
        print(f"scenario took {time.monotonic() - started:.1f} s")
        yield {"server": server, "elastic": elastic, "work": work}
    finally:
        gate_b.touch()
        gate_c.touch()
        server.stop()


def attempts(run) -> list[dict]:
    return [a for a in run["server"].store.attempts() if a.job_id == run["elastic"]]


def log(run, attempt: int) -> str:
    return run["server"].executor.log_path(run["elastic"], attempt).read_text()


def test_the_scheduler_rescales_the_job_one_two_one_replicas(run):
    assert [len(a.slots.split(",")) for a in attempts(run)] == [1, 2, 1]
    assert [a.how for a in attempts(run)] == ["moved", "moved", "completed"]
    moves = [e for e in run["server"].store.events(run["elastic"]) if e.event == "move"]
    assert len(moves) == 2


def test_it_ends_with_its_steps_and_the_examples_they_hold(run):
    final = re.search(r"final steps=(\d+) examples=(\d+)", log(run, 3))
    assert final is not None, log(run, 3)
    assert (int(final.group(1)), int(final.group(2))) == (STEPS, STEPS * BATCH)
    assert run["server"].job(run["elastic"]).steps_done == STEPS


def test_each_attempt_resumes_where_the_last_stopped_on_its_own_number_of_replicas(run):
    rows = attempts(run)
    for before, after in zip(rows, rows[1:]):
        assert after.first_step == before.end_step > 0
    assert f"attempt: 2 replica(s), batch {BATCH}, from step {rows[1].first_step}" in log(run, 2)


def test_both_replicas_stop_at_the_same_step_when_the_lease_is_not_renewed(run):
    stops = re.findall(r"attempt 2: preempted at step (\d+)/\d+ \(([^)]*)\)", log(run, 2))
    assert len(stops) == 2, log(run, 2)
    assert stops[0][0] == stops[1][0] == str(attempts(run)[1].end_step)
    assert {reason for _, reason in stops} == {"lease not renewed", "another rank is stopping"}


def test_the_server_keeps_the_noise_scale_and_a_step_time_model_fitted_at_each_size(run):
    store = run["server"].store
    noise, params = store.elastic_models()[run["elastic"]]
    assert noise is not None and noise > 0
    assert set(params) == {"cpu"} and len(params["cpu"]) == 7
    sizes = {r.gpus for r in store.elastic_steps() if r.job_id == run["elastic"]}
    assert sizes == {1, 2}
