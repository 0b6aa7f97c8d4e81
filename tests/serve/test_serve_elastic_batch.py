"""Elastic jobs whose target is in examples: the batch the goodput policy chooses from their
measured noise scale, given at each (re)start, and the examples counted across batches (fake
clock, fake executor, no real processes)."""

from __future__ import annotations

import json

import pytest
import yaml

from apportion.core.errors import InputError
from apportion.policies import make_policy
from apportion.serve.estimates.elastic_batch import attempt_batch, examples_at
from apportion.serve.jobs.jobspec import load_job_file, spec_from_mapping
from apportion.serve.jobs.records import JobRecord
from apportion.serve.store.state import StateStore
from test_serve_scheduler import make, run_for

TARGET = 100_000
CHOOSES = {"min_gpus": 1, "max_gpus": 2, "batch_size": 32, "init_batch_size": 32, "lr_rule": "sqrt",
           "target_examples": TARGET, "max_batch_size": 512}


def elastic_job(name="elastic", **elastic):
    return {"name": name, "command": "train", "elastic": {**CHOOSES, **elastic}}


@pytest.mark.parametrize("noise_scale, larger", [(1e6, True), (1.0, False)])
def test_goodput_restarts_a_job_at_the_batch_its_measured_noise_scale_makes_best(tmp_path, noise_scale, larger):
    scheduler, executor, clock = make(tmp_path, slots="cpu:2", policy=make_policy("goodput", restart_cost_s=1.0))
    elastic = scheduler.submit(elastic_job(), "ann")
    fixed = scheduler.submit({"name": "fixed", "command": "train", "total_steps": 100}, "ann")
    scheduler.tick()
    first = executor.envs[(elastic, 1)]
    # nothing measured yet: its own batch, and the steps that reach its target at that batch
    assert (first["APPORTION_BATCH_SIZE"], first["APPORTION_TARGET_EXAMPLES"], first["APPORTION_TOTAL_STEPS"]) == \
        ("32", str(TARGET), str(-(-TARGET // 32)))

    scheduler.lease(elastic, 1, 0)
    # 40 steps of two micro-batches of 16 (one slot), 0.1 s each, and the noise scale it measured
    scheduler.progress(elastic, 1, 40, 10.0, noise_scale=noise_scale, micro_batch=16, micro_batches=2,
                       examples_done=40 * 32)
    checkpoints = tmp_path / "jobs" / str(elastic) / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "step-00000040.pt").write_bytes(b"")  # where its next attempt resumes
    run_for(scheduler, clock, 20)
    with scheduler.lock:
        executor.finish(fixed, 0)
    run_for(scheduler, clock, 30)  # a rescale to both slots (SIGTERM here: fake jobs never ask)

    second = executor.envs[(elastic, 2)]
    batch = int(second["APPORTION_BATCH_SIZE"])
    assert executor.replicas[(elastic, 2)] == 2
    assert (batch > 32) == larger and 32 <= batch <= 512
    assert second["APPORTION_TOTAL_STEPS"] == str(40 + -(-(TARGET - 40 * 32) // batch))
    row = scheduler.store.job(elastic)
    assert row.batch_log == ((0, 0, 32), (40, 1280, batch))
    assert row.total_steps == int(second["APPORTION_TOTAL_STEPS"])
    info = scheduler.job_info(row)  # what `apportion queue` shows: examples against the target
    assert (info["examples_done"], info["target_examples"], info["batch_size"]) == (1280, TARGET, batch)


def stored_job(tmp_path, elastic: dict, **fields) -> JobRecord:
    """An elastic job as the state file gives it back, with ``fields`` set."""
    store = StateStore(tmp_path / "state.db")
    job_id = store.insert_job(spec=elastic_job(**elastic), name="elastic", user="ann", queue="q", priority=1.0,
                              kind="elastic", gpus=1, total_steps=10, submitted=0.0)
    store.update_job(job_id, **fields)
    return store.job(job_id)


def test_the_examples_done_follow_each_attempts_batch_and_a_resume_drops_what_was_redone(tmp_path):
    log = [[0, 0, 32], [40, 1280, 128], [50, 2560, 64]]
    assert [examples_at(log, s, 32) for s in (0, 40, 45, 50, 52)] == [0, 1280, 1920, 2560, 2688]
    row = stored_job(tmp_path, {}, steps_done=45, batch_log=json.dumps(log), batch_size=256, slots="cpu:0")
    batch, fields = attempt_batch(row)  # a crash after step 50 resumed from step 45's checkpoint
    assert batch == 256
    assert fields["batch_log"] == ((0, 0, 32), (40, 1280, 128), (45, 1920, 256))
    assert fields["total_steps"] == 45 + -(-(TARGET - 1920) // 256)


def test_a_job_whose_target_is_in_steps_keeps_its_batch_and_its_steps(tmp_path):
    row = stored_job(tmp_path, {"target_examples": None, "max_batch_size": None}, steps_done=3, batch_size=256,
                     slots="cpu:0")
    assert attempt_batch(row) == (None, {})


def test_a_target_in_epochs_is_epochs_times_the_data_set_and_replaces_total_steps():
    spec = spec_from_mapping(elastic_job(target_examples=None, epochs=3, dataset_size=50_000), "job.yaml")
    assert spec.elastic.target_examples == 150_000
    assert spec.total_steps == -(-150_000 // 32)


@pytest.mark.parametrize("elastic, extra, field, message", [
    ({"max_batch_size": 16}, {}, "elastic.max_batch_size", "must be at least batch_size"),
    ({"target_examples": None}, {}, "elastic.max_batch_size", "target must be in examples"),
    ({"target_examples": None, "epochs": 2}, {}, "elastic.dataset_size", "is required with elastic.epochs"),
    ({"epochs": 2, "dataset_size": 10}, {}, "elastic.target_examples", "not both"),
    ({"target_examples": 0}, {}, "elastic.target_examples", "must be a whole number from 1"),
    ({}, {"total_steps": 100}, "total_steps", "in steps or in examples"),
])
def test_a_bad_target_or_batch_limit_names_its_field_and_line(tmp_path, elastic, extra, field, message):
    text = {**elastic_job(**elastic), **extra}
    text["elastic"] = {k: v for k, v in text["elastic"].items() if v is not None}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    with pytest.raises(InputError, match=message) as caught:
        load_job_file(path)
    assert caught.value.field == field
    shown = path.read_text().splitlines()[caught.value.line - 1]
    assert field.split(".")[-1] in shown or (shown == "elastic:" and field.split(".")[-1] not in str(text))
