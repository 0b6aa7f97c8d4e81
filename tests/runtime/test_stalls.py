"""Data stalls: the share of step time a job waits for its next batch, on loaders that take a known time."""

import threading
import time

import pytest

from apportion.runtime import DataStall, Job, fetching
from apportion.runtime.testing import FakeLeaseServer


class Clock:
    """A clock that moves only when told: a batch of 20 ms and a step of 10 ms are exactly that."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


class SlowLoader:
    """Batches that take ``fetch_s`` to read (marked as fetching) and ``prepare_s`` to pre-process."""

    def __init__(self, clock: Clock, batches: int, fetch_s: float = 0.0, prepare_s: float = 0.0, mark=True) -> None:
        self.clock, self.batches, self.fetch_s, self.prepare_s, self.mark = clock, batches, fetch_s, prepare_s, mark

    def __iter__(self):
        for index in range(self.batches):
            if self.mark:
                with fetching():
                    self.clock.spend(self.fetch_s)
            else:
                self.clock.spend(self.fetch_s)
            self.clock.spend(self.prepare_s)
            yield index


def quiet_job(steps: int, clock=time.perf_counter) -> Job:
    return Job(steps, log=None, clock=clock, handle_sigterm=False)


def test_20_ms_of_data_and_10_ms_of_compute_is_a_stall_of_two_thirds():
    clock = Clock()
    job = quiet_job(30, clock)
    seen = []
    for step, batch in zip(job.steps(dict), job.batches(SlowLoader(clock, 100, prepare_s=0.020))):
        seen.append(batch)
        clock.spend(0.010)
    assert seen == list(range(30))
    assert job.data_stall == DataStall(pytest.approx(2 / 3))  # no fetch marked: only the total is known
    assert job.data_stall.fields() == {"data_stall": pytest.approx(2 / 3)}


def test_fetching_splits_the_wait_into_fetch_and_pre_processing():
    clock = Clock()
    job = quiet_job(10, clock)
    for _ in zip(job.steps(dict), job.batches(SlowLoader(clock, 10, fetch_s=0.015, prepare_s=0.005))):
        clock.spend(0.020)
    # per step: 15 ms fetching, 5 ms pre-processing, 20 ms computing
    assert job.data_stall == DataStall(pytest.approx(0.5), pytest.approx(0.375), pytest.approx(0.125))
    assert set(job.data_stall.fields()) == {"data_stall", "fetch_stall", "preprocess_stall"}


def test_a_wait_before_the_step_counts_against_the_time_the_step_did_not_see():
    clock = Clock()
    job = quiet_job(12, clock)
    # the batch first: each wait happens between two steps' bodies, not inside one
    for _ in zip(job.batches(SlowLoader(clock, 100, prepare_s=0.030)), job.steps(dict)):
        clock.spend(0.010)
    # 13 waits of 30 ms (the first before any step, the last for a batch never used) in 12 steps of 10 ms
    assert job.data_stall.wait == pytest.approx(390 / 510)


def test_a_plain_loop_says_its_wait_with_one_call_or_one_block():
    clock = Clock()
    job = quiet_job(4, clock)
    for step in job.steps(dict):
        if step % 2:
            with job.waiting_for_data():
                clock.spend(0.030)
        else:
            job.data_wait(0.010, fetch_s=0.004)
            clock.spend(0.010)  # the wait it timed itself, as the clock saw it
        clock.spend(0.010)
    # waits 10, 30, 10, 30 ms in steps of 20, 40, 20, 40 ms; fetching 4 ms twice
    assert job.data_stall == DataStall(pytest.approx(80 / 120), pytest.approx(8 / 120), pytest.approx(72 / 120))
    with pytest.raises(ValueError, match="data_wait: seconds must be a finite number"):
        job.data_wait(float("nan"))
    with pytest.raises(ValueError, match="fetch_s"):
        job.data_wait(0.01, fetch_s=-1)


def test_a_job_that_times_no_wait_reports_no_stall_and_an_idle_loader_none():
    clock = Clock()
    job = quiet_job(5, clock)
    for _ in job.steps(dict):
        clock.spend(0.010)
    assert job.data_stall is None

    job = quiet_job(5, clock)
    for _ in zip(job.steps(dict), job.batches(SlowLoader(clock, 100))):
        clock.spend(0.010)
    assert job.data_stall == DataStall(0.0)


def test_a_loader_is_read_pass_after_pass_and_a_spent_generator_ends_the_batches():
    job = quiet_job(7)
    assert [batch for _, batch in zip(job.steps(dict), job.batches([1, 2, 3]))] == [1, 2, 3, 1, 2, 3, 1]
    once = (i for i in range(2))
    assert list(quiet_job(5).batches(once)) == [0, 1]


def test_fetching_in_another_thread_is_not_part_of_the_wait():
    clock = Clock()
    job = quiet_job(3, clock)

    def prefetch():  # a reader thread fetching while the step computes
        with fetching():
            clock.spend(0.001)

    for _ in zip(job.steps(dict), job.batches(SlowLoader(clock, 3, prepare_s=0.010, mark=False))):
        reader = threading.Thread(target=prefetch)
        reader.start()
        reader.join()
        clock.spend(0.009)
    assert job.data_stall == DataStall(pytest.approx(0.5))  # no split: nothing fetched while it waited


def test_progress_reports_carry_the_stall_of_a_loader_that_sleeps(tmp_path, monkeypatch):
    class Sleepy:
        def __iter__(self):
            while True:
                time.sleep(0.020)
                yield "batch"

    with FakeLeaseServer() as server:
        for name, value in server.job_env(total_steps=16).items():
            monkeypatch.setenv(name, value)
        job = Job.from_env(report_every_s=0.1, log=None)
        for _ in zip(job.steps(dict), job.batches(Sleepy())):
            time.sleep(0.010)
        reports = server.progress_calls()
    # sleeps overshoot on a busy machine, but 20 ms against 10 ms stays far from 0, 1/2 and 1
    assert 0.5 < reports[-1]["data_stall"] < 0.85 and reports[-1]["steps_done"] == 16
    assert "fetch_stall" not in reports[-1]
    assert all(0.3 < r["data_stall"] < 0.95 for r in reports)


def test_a_pytorch_data_loader_with_workers_is_timed_in_the_training_process():
    torch_data = pytest.importorskip("torch.utils.data")

    class Slow(torch_data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.010)  # one worker: 40 ms a batch of four, far more than a step
            return index

    loader = torch_data.DataLoader(Slow(), batch_size=4, num_workers=1)
    job = quiet_job(8)
    for _ in zip(job.steps(dict), job.batches(loader)):
        time.sleep(0.005)
    assert 0.6 < job.data_stall.wait < 1.0 and job.data_stall.fetch is None
