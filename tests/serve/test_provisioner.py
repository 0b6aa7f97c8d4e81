"""A rented cluster on the server, through the HTTP API: a job waits for the instance its
provisioning policy rents, runs on it, pays its hourly price for the time held, and resumes
on another instance when a spot one is taken away (a fake cloud and a fake executor)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from apportion.core.market import ON_DEMAND, SPOT, Market
from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.policies.provisioning import make_provisioning
from apportion.serve.http.api import create_app
from apportion.serve.resources.rental.provisioner import NoProvisioner
from apportion.serve.resources.rental.fake import FakeProvisioner
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Slot
from apportion.serve.store.state import StateStore

ON_DEMAND_V100 = "aws/us-east-1/p3.2xlarge/on-demand"
SPOT_V100 = "aws/us-east-1/p3.2xlarge/spot"
SLOTS = [Slot(f"v100:{i}", "v100", "") for i in range(2)]  # at most two V100s rented at once
JOB = {"name": "cnn", "command": "python train.py", "total_steps": 1000, "user": "ann"}


def market() -> Market:
    """One V100 instance on-demand at $3.06 an hour and on spot at $0.90, prices that never change."""
    return Market(
        name=np.array(["p3.2xlarge"] * 2, dtype=object), cloud=np.array(["aws"] * 2, dtype=object),
        region=np.array(["us-east-1"] * 2, dtype=object), gpu_type=np.array(["v100"] * 2, dtype=object),
        gpus=np.array([1, 1]), market=np.array([ON_DEMAND, SPOT]), times_s=np.array([0.0]),
        price_per_hour=np.array([[3.06], [0.90]]),
    )


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path, provisioning: str = "spot-fallback"):
    clock, executor = Clock(), FakeExecutor(tmp_path)
    cloud = FakeProvisioner(market(), make_provisioning(provisioning), ("v100",), {"v100": 2}, round_s=600.0,
                            delay_s=30.0)
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, fill_gap_s=0.0, renew_wait_s=0.0, plan_ahead_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, SLOTS, Fifo(), config, clock=clock,
                          provisioner=cloud)
    return scheduler, TestClient(create_app(scheduler)), executor, cloud, clock


def rented(client) -> dict:
    return client.get("/status").json()["rented"]


def test_a_job_waits_for_its_instance_runs_on_it_and_pays_its_price_for_the_time_held(tmp_path):
    scheduler, client, executor, cloud, clock = make(tmp_path)
    client.post("/jobs", json=JOB)
    scheduler.tick()
    assert cloud.requests == [(clock.now, {SPOT_V100: 1})]  # the cheapest spot instance, for one GPU
    assert client.get("/jobs/1").json()["status"] == "queued" and executor.started == []

    clock.now += 30  # the instance joins
    scheduler.tick()
    job = client.get("/jobs/1").json()
    assert job["status"] == "running" and job["alloc"] == "v100:0"
    assert rented(client)["held"] == {SPOT_V100: 1}

    clock.now += 7200  # two hours held at $0.90
    scheduler.tick()
    assert rented(client)["usd"] == {SPOT_V100: pytest.approx(1.80)}
    metrics = client.get("/metrics").text
    assert f'apportion_rented_usd_total{{instance_type="{SPOT_V100}"}} 1.8' in metrics


def test_a_spot_instance_taken_away_preempts_its_job_which_resumes_on_demand(tmp_path):
    scheduler, client, executor, cloud, clock = make(tmp_path)
    client.post("/jobs", json=JOB)
    scheduler.tick()
    clock.now += 30
    scheduler.tick()
    assert [a.attempt for a in executor.started] == [1]

    clock.now += 3600
    cloud.take_away(SPOT_V100)
    executor.lose(1, "its Ray node died")  # the attempt goes with the node
    scheduler.tick()
    job = client.get("/jobs/1").json()
    assert job["status"] == "queued" and job["retries"] == 1  # a retry that does not count against --max-retries
    assert any("lost: its Ray node died" in e.detail for e in scheduler.store.events(1))
    assert cloud.requests[-1] == (clock.now, {ON_DEMAND_V100: 1})  # spot was just lost: on-demand instead

    clock.now += 30
    scheduler.tick()
    job = client.get("/jobs/1").json()
    assert job["status"] == "running" and job["attempts"] == 2
    clock.now += 3600
    scheduler.tick()
    assert rented(client)["usd"] == {SPOT_V100: pytest.approx(0.90), ON_DEMAND_V100: pytest.approx(3.06)}
    assert cloud.spot_losses() == {SPOT_V100: 1}


def test_jobs_past_the_most_the_server_may_rent_wait_the_earlier_first(tmp_path):
    scheduler, client, executor, cloud, clock = make(tmp_path, "static")
    client.post("/jobs", json=JOB)
    client.post("/jobs", json={**JOB, "name": "pair", "gpus": 2})  # one V100 left of the two: it waits
    scheduler.tick()
    assert cloud.requests == [(clock.now, {ON_DEMAND_V100: 1})]

    clock.now += 30
    scheduler.tick()
    executor.finish(1, 0)
    clock.now += 60
    scheduler.tick()
    assert cloud.requests[-1] == (clock.now, {ON_DEMAND_V100: 2})  # both, for the pair
    clock.now += 30
    scheduler.tick()
    job = client.get("/jobs/2").json()
    assert job["status"] == "running" and job["alloc"] == "v100:0,v100:1"


def test_the_dollars_of_an_earlier_run_carry_on_in_the_state_file(tmp_path):
    scheduler, client, _, _, clock = make(tmp_path, "static")
    client.post("/jobs", json=JOB)
    scheduler.tick()
    clock.now += 30
    scheduler.tick()
    clock.now += 3600
    scheduler.plan(clock.now)  # a round writes the dollars so far
    scheduler.store.close()

    again, client, *_ = make(tmp_path, "static")
    assert rented(client)["usd"] == {ON_DEMAND_V100: pytest.approx(3.06)}


def test_an_owned_cluster_rents_nothing_and_shows_no_dollars(tmp_path):
    config = ServeConfig(state_dir=tmp_path, round_s=600.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), SLOTS, Fifo(), config)
    assert isinstance(scheduler.state.provisioner, NoProvisioner)
    client = TestClient(create_app(scheduler))
    client.post("/jobs", json=JOB)
    scheduler.tick()
    assert client.get("/jobs/1").json()["status"] == "running"
    assert "rented" not in client.get("/status").json()
    assert "apportion_rented_usd" not in client.get("/metrics").text
