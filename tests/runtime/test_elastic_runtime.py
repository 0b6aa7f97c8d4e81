"""Elastic training in the runtime: the batch split, the learning-rate rules, the gradient noise
estimate, and end to end on CPU with gloo, a job rescaled 1 → 2 → 1 replicas that ends where
an unrescaled run does."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from apportion.runtime import ResumableSampler
from apportion.runtime.elastic import ElasticSetting, GradientNoise, replica_indices

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_elastic.py"


def test_a_batch_is_split_evenly_the_first_replicas_taking_the_remainder():
    sizes = [ElasticSetting(10, 10, world_size=3, rank=r).local_batch for r in range(3)]
    assert sizes == [4, 3, 3]
    assert [ElasticSetting(10, 10, world_size=3, rank=r).local_slice() for r in range(3)] == [(0, 4), (4, 7), (7, 10)]


def test_the_environment_sets_the_batch_rule_and_place():
    environ = {"APPORTION_BATCH_SIZE": "64", "APPORTION_INIT_BATCH_SIZE": "16", "APPORTION_LR_RULE": "sqrt",
               "WORLD_SIZE": "2", "RANK": "1"}
    setting = ElasticSetting.from_environ(environ, batch_size=32, init_batch_size=32)

    assert (setting.batch_size, setting.init_batch_size, setting.world_size, setting.rank) == (64, 16, 2, 1)
    assert setting.lr_scale() == pytest.approx(2.0)  # √(64 / 16)


@pytest.mark.parametrize("environ, message", [
    ({"APPORTION_BATCH_SIZE": "lots"}, "APPORTION_BATCH_SIZE='lots' is not a number"),
    ({"APPORTION_LR_RULE": "linear"}, "learning-rate rule must be one of sqrt, adascale, none, got 'linear'"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "rank 2 is not in a world of 2"),
])
def test_a_bad_setting_says_what_is_wrong(environ, message):
    with pytest.raises(ValueError, match=message):
        ElasticSetting.from_environ(environ, batch_size=32, init_batch_size=32)


def test_the_noise_estimate_recovers_a_known_gradient_noise_scale():
    """Per-example gradients μ + ε with |μ|² = 1 and tr(Σ) = 50: φ = 50 examples."""
    rng = np.random.default_rng(0)
    dim, mean = 50, np.full(50, 1 / np.sqrt(50))
    noise = GradientNoise(smoothing=0.99)
    for _ in range(2000):
        examples = mean + rng.standard_normal((64, dim))  # tr(Σ) = dim
        halves = examples.reshape(2, 32, dim).mean(axis=1)
        noise.update(float((halves**2).sum(axis=1).mean()), 32, float((examples.mean(axis=0) ** 2).sum()), 64)

    assert noise.noise_scale == pytest.approx(50.0, rel=0.15)
    assert noise.efficiency(64, 32) == pytest.approx((50 + 32) / (50 + 64), rel=0.05)
    assert noise.gain(64, 32) == pytest.approx(noise.efficiency(64, 32) * 2)


def test_replicas_split_each_global_batch_and_a_new_world_continues_at_the_next_example():
    one = ResumableSampler(100, seed=3)
    first = replica_indices(one, ElasticSetting(8, 8))
    two = [ResumableSampler(100, seed=3) for _ in range(2)]
    for sampler in two:
        sampler.seek(8)
    second = [replica_indices(s, ElasticSetting(8, 8, world_size=2, rank=r)) for r, s in enumerate(two)]

    order = ResumableSampler(100, seed=3).take(16)
    assert first == order[:8]
    assert second[0] + second[1] == order[8:16]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(replicas: int, workdir: Path, *args: str) -> str:
    """Run the example as ``replicas`` processes (rank 0's output returned); fail on a crash."""
    return ended(started(replicas, workdir, *args))


def started(replicas: int, workdir: Path, *args: str) -> list[subprocess.Popen]:
    """The example started as ``replicas`` processes (see ``ended``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    port = str(free_port())
    procs = []
    for rank in range(replicas):
        extra = {"WORLD_SIZE": str(replicas), "RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, str(EXAMPLE), "--steps", "30", *args], cwd=workdir,
                                      env={**env, **extra} if replicas > 1 else env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def ended(procs: list[subprocess.Popen]) -> str:
    """Rank 0's output once every process has ended; fail on a crash."""
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode in (0, 75), out
    return outputs[0]


def losses(path: Path) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in (line.split() for line in path.read_text().splitlines())}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An unrescaled run of 30 steps at batch 32, and the same job on 1 replica to step 10, 2
    to step 20 and 1 to the end (each attempt a fresh set of processes, as after a preemption); the
    unrescaled run beside the first attempt."""
    work = tmp_path_factory.mktemp("elastic")
    unrescaled = started(1, work, "--loss-log", "base.log")
    first = launch(1, work, "--checkpoint-dir", "same", "--stop-at", "10", "--loss-log", "same.log")
    middle = launch(2, work, "--checkpoint-dir", "same", "--stop-at", "20", "--loss-log", "same.log")
    last = launch(1, work, "--checkpoint-dir", "same", "--loss-log", "same.log")
    base = ended(unrescaled)
    return {"work": work, "base": base, "first": first, "middle": middle, "last": last}


def final(output: str) -> dict[str, str]:
    line = next(line for line in output.splitlines() if line.startswith("final "))
    return dict(part.split("=") for part in line.split()[1:])


def test_each_attempt_resumes_where_the_last_stopped_on_its_own_number_of_replicas(runs):
    assert "stopped at step 10 with 320 examples seen" in runs["first"]
    assert "attempt: 2 replica(s), batch 32, from step 10, 320 examples seen" in runs["middle"]
    assert "stopped at step 20 with 640 examples seen" in runs["middle"]
    assert "attempt: 1 replica(s), batch 32, from step 20, 640 examples seen" in runs["last"]


def test_rescaled_1_2_1_it_ends_with_the_steps_examples_and_loss_curve_of_the_unrescaled_run(runs):
    done, unrescaled = final(runs["last"]), final(runs["base"])
    assert (done["steps"], done["examples"]) == ("30", "960") == (unrescaled["steps"], unrescaled["examples"])
    base, rescaled = losses(runs["work"] / "base.log"), losses(runs["work"] / "same.log")
    assert sorted(rescaled) == list(range(1, 31))
    # the same examples in the same order, the gradient averaged over the same global batch:
    # only the order of floating-point sums differs
    for step in base:
        assert rescaled[step] == pytest.approx(base[step], rel=1e-5), step


def test_a_target_in_examples_is_counted_in_steps_at_the_batch_of_now():
    setting = ElasticSetting.from_environ({"APPORTION_BATCH_SIZE": "64", "APPORTION_TARGET_EXAMPLES": "1000"},
                                          batch_size=32, init_batch_size=32)
    assert setting.target_examples == 1000
    assert setting.steps_left(320) == 11  # 680 examples: ten steps of 64 fall short, the eleventh passes it
    assert setting.steps_left(1024) == 0


def test_a_larger_batch_continues_at_the_next_example():
    order = ResumableSampler(4096, seed=0).take(320 + 64)
    before = ResumableSampler(4096, seed=0)
    for _ in range(10):
        before.take(32)
    after = ResumableSampler(4096, seed=0)
    after.load_state(before.state())
    assert after.take(64) == order[320:]


@pytest.fixture(scope="module")
def batch_change(tmp_path_factory):
    """A job with a target of 1,000 examples: 10 steps at batch 32 on one replica, then resumed at
    batch 64 on one replica, and (from a copy of the same checkpoint) at batch 64 on two, side by side."""
    import shutil

    work = tmp_path_factory.mktemp("elastic-batch")
    target = ("--target-examples", "1000")
    first = launch(1, work, *target, "--checkpoint-dir", "one", "--stop-at", "10", "--loss-log", "one.log")
    shutil.copytree(work / "one", work / "two")
    shutil.copy(work / "one.log", work / "two.log")
    on_one = started(1, work, *target, "--batch-size", "64", "--checkpoint-dir", "one", "--loss-log", "one.log")
    two = launch(2, work, *target, "--batch-size", "64", "--checkpoint-dir", "two", "--loss-log", "two.log")
    one = ended(on_one)
    return {"work": work, "first": first, "one": one, "two": two}


def test_a_batch_change_across_a_restart_resumes_at_the_next_example_and_stops_at_the_target(batch_change):
    assert "stopped at step 10 with 320 examples seen" in batch_change["first"]
    for run, replicas in (("one", 1), ("two", 2)):
        assert f"attempt: {replicas} replica(s), batch 64, from step 10, 320 examples seen" in batch_change[run]
        done = final(batch_change[run])
        assert (done["steps"], done["examples"]) == ("21", str(320 + 11 * 64))  # the first step at or past 1,000
    one, two = losses(batch_change["work"] / "one.log"), losses(batch_change["work"] / "two.log")
    assert sorted(one) == sorted(two) == list(range(1, 22))
    for step in one:  # the same examples in the same order on one replica or two
        assert two[step] == pytest.approx(one[step], rel=1e-5), step
