"""Periodic checkpoints: the setting, CheckFreq's interval, and what a job says it will do."""

import os

import pytest

from apportion.runtime import Checkpointer, Job, JobEnv
from apportion.runtime.cadence import MAX_LOST_S, Cadence, CheckpointEvery, auto_interval


def test_the_setting_reads_auto_a_bound_a_fixed_interval_or_off():
    assert CheckpointEvery.parse(None) == CheckpointEvery("auto", MAX_LOST_S)
    assert CheckpointEvery.parse("auto") == CheckpointEvery("auto", MAX_LOST_S)
    assert CheckpointEvery.parse("auto:120") == CheckpointEvery("auto", 120.0)
    assert CheckpointEvery.parse("600") == CheckpointEvery.parse("600s") == CheckpointEvery.parse(600)
    assert CheckpointEvery.parse("off") == CheckpointEvery("off")
    assert [str(CheckpointEvery.parse(v)) for v in ("auto", "auto:120", "600", "off")] == ["auto", "auto:120", "600", "off"]
    for bad in ("sometimes", "-5", "auto:0", True):
        with pytest.raises(ValueError, match="checkpoint_every"):
            CheckpointEvery.parse(bad)


def test_checkfreq_keeps_the_overhead_at_5_percent_between_a_second_and_the_lost_work_bound():
    interval, words = auto_interval(step_s=0.05, checkpoint_s=0.5, max_lost_s=300)
    assert interval == pytest.approx(10.0) and "overhead 5.0%" in words and "~200 steps" in words
    assert auto_interval(step_s=0.05, checkpoint_s=0.001, max_lost_s=300)[0] == 1.0  # cheap: once a second
    interval, words = auto_interval(step_s=1.0, checkpoint_s=30.0, max_lost_s=300)
    assert interval == 300 and "the bound" in words and "10.0%" in words  # costly: the bound wins, and says so


def test_auto_measures_with_its_first_checkpoint_then_follows_the_measurements():
    cadence = Cadence(CheckpointEvery.parse("auto"))
    assert not cadence.due(0.5) and cadence.due(1.0)  # the first one, a second in, measures the cost
    said = cadence.measured(step_s=0.1, snapshot_s=0.1, write_s=0.4)
    assert cadence.interval_s == pytest.approx(10.0) and said.startswith("periodic checkpoints every 10.0 s")
    assert not cadence.due(9.9) and cadence.due(10.0)
    assert cadence.measured(step_s=0.1, snapshot_s=0.1, write_s=0.5) is None  # a small change is not retold
    assert Cadence(CheckpointEvery.parse("7")).due(7.0) and not Cadence(CheckpointEvery.parse("off")).due(1e9)


def test_the_environment_sets_the_cadence_and_the_job_says_what_it_does(tmp_path):
    said = []
    job = Job(5, env=JobEnv(checkpoint_every="0"), checkpoint_dir=tmp_path, checkpoint_every="off", log=said.append)
    state = {"done": 0}
    for step in job.steps(lambda: dict(state)):
        state["done"] = step + 1
        job.checkpointer.wait()  # so that every boundary finds the previous write done
    assert "periodic checkpoints every 0 s" in said[0]  # the environment wins over the argument
    assert [step for step, _ in Checkpointer(tmp_path).checkpoints()] == [3, 4]  # the newest 2 of steps 1-4

    said.clear()
    off = Job(5, checkpoint_dir=tmp_path / "off", checkpoint_every="off", log=said.append)
    for _ in off.steps(dict):
        pass
    assert "periodic checkpoints off" in said[0] and os.listdir(tmp_path / "off") == []


def test_a_script_that_never_restores_is_warned_that_it_starts_over(tmp_path):
    Checkpointer(tmp_path).save({"done": 7}, 7)
    said = []
    job = Job(3, env=JobEnv(job_id=None, attempt=2), checkpoint_dir=tmp_path, log=said.append)
    for _ in job.steps(dict):  # no job.restore() before the loop
        pass
    assert any("WARNING: step-00000007.pt is on disk but this script never called job.restore()" in m for m in said)

    said.clear()
    resumed = Job(9, checkpoint_dir=tmp_path, log=said.append)
    resumed.restore()
    for _ in resumed.steps(dict):
        pass
    assert not any("WARNING" in m for m in said)
