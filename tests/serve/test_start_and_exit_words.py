"""What the server says of an attempt's start and end: whether it started warm (forked from a
spare with torch imported) or cold, and that a job which exits 0 short of the steps it reported
has failed, not completed."""

from __future__ import annotations

from dataclasses import replace

from test_serve_scheduler import job, make

from apportion.serve.scheduler.scheduler import Scheduler
from apportion.serve.base.slots import parse_slots


def events(scheduler, job_id, kind):
    return [e.detail for e in scheduler.store.events(job_id) if e.event == kind]


def test_the_start_event_says_warm_or_cold(tmp_path, monkeypatch):
    scheduler, executor, clock = make(tmp_path)
    fake_start = executor.start

    def start(job_id, attempt, *args, **kwargs):  # as the local executor says it: a spare took it, or none did
        return replace(fake_start(job_id, attempt, *args, **kwargs), warm=job_id == 1)

    monkeypatch.setattr(executor, "start", start)
    scheduler.submit(job("warm"), "ann")
    scheduler.submit(job("cold"), "ann")
    scheduler.tick()
    assert events(scheduler, 1, "start") == ["attempt 1 on cpu:0 pid 1000000, warm"]
    assert events(scheduler, 2, "start") == ["attempt 1 on cpu:1 pid 1000001, cold"]


def test_a_job_that_exits_0_short_of_its_steps_has_failed(tmp_path):
    scheduler, executor, clock = make(tmp_path)
    for name in ("quits-early", "done", "silent"):
        scheduler.submit(job(name, steps=100), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 40)
    scheduler.lease(2, 1, 40)
    scheduler.progress(2, 1, 100, 1.0)  # its final report
    for j in (1, 2):
        executor.finish(j, 0)
    scheduler.tick()

    quit_early = scheduler.store.job(1)
    assert quit_early.status == "failed"
    assert quit_early.reason == "exited 0 after 40 of 100 steps (attempt 1)"
    assert events(scheduler, 1, "fail") == ["exited 0 after 40 of 100 steps"]
    assert scheduler.store.job(2).status == "completed"


def test_a_job_that_never_reports_its_steps_is_taken_at_its_word(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    scheduler.submit(job("silent", steps=100), "ann")  # a command that never calls the server
    scheduler.tick()
    executor.finish(1, 0)
    scheduler.tick()
    assert scheduler.store.job(1).status == "completed"


def test_a_job_that_ended_while_no_server_ran_is_not_judged_by_reports_that_found_nobody(tmp_path):
    scheduler, executor, clock = make(tmp_path, slots="cpu:1")
    scheduler.submit(job("j", steps=100), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 40)
    executor.end_unseen(1, 0)  # its final report was sent while the server was down
    executor.forget()
    again = Scheduler(scheduler.store, executor, parse_slots("cpu:1"), scheduler.policy, scheduler.config, clock=clock)
    again.recover()
    assert scheduler.store.job(1).status == "completed"
