"""Long work's progress where stderr is not a terminal: a plain line every few seconds on stderr,
stdout left to the results."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from apportion.cli.progress import EVERY_S, ProgressLines, duration

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^las: [\d,]+/1,000 jobs ended, virtual time [\d.]+ d, \d+ s elapsed, ETA (\d+ s|\d+ min|\?)$")


def test_a_line_says_what_ended_the_virtual_time_and_the_eta_at_the_pace_so_far():
    lines = ProgressLines("jobs ended", every_s=5.0, stream=io.StringIO())
    task = lines.add_task("simulate", total=103_000, day=0.0)
    lines.update(task, completed=12_000, day=3.2)

    # 14 s for 12,000 jobs: 91,000 more take 106 s
    assert lines.line(14.0) == "simulate: 12,000/103,000 jobs ended, virtual time 3.2 d, 14 s elapsed, ETA 2 min"


def test_several_tasks_share_a_line_whose_eta_is_the_slowest_ones():
    lines = ProgressLines("jobs ended", every_s=5.0, stream=io.StringIO())
    fifo, las = lines.add_task("fifo", total=100, day=0.0), lines.add_task("las", total=100, day=0.0)
    lines.update(fifo, completed=50, day=1.0)
    lines.update(las, completed=10, day=0.5)

    # las, 10 of 100 in 60 s: 90 more take 540 s (fifo's 50 more, 60 s)
    assert lines.line(60.0) == ("fifo: 50/100 jobs ended, virtual time 1.0 d; las: 10/100 jobs ended, virtual time "
                                "0.5 d, 60 s elapsed, ETA 9 min")


def test_a_total_learnt_later_replaces_the_first_guess():
    lines = ProgressLines("jobs ended", every_s=5.0, stream=io.StringIO())
    task = lines.add_task("replay", total=1, day=0.0)
    lines.update(task, total=40, completed=10, day=0.5)

    assert lines.line(20.0) == "replay: 10/40 jobs ended, virtual time 0.5 d, 20 s elapsed, ETA 60 s"


def test_lines_come_no_sooner_than_the_interval_and_not_for_short_work():
    stream = io.StringIO()
    lines = ProgressLines("replays done", virtual_time=False, every_s=3600.0, stream=stream)
    task = lines.add_task("4 replays", total=4)
    for done in range(1, 5):
        lines.update(task, completed=done)

    assert stream.getvalue() == ""


def test_durations_read_as_seconds_minutes_or_hours():
    assert [duration(s) for s in (0.4, 89, 150, 5400, float("nan"))] == ["0 s", "89 s", "2 min", "1.5 h", "?"]


def test_a_replay_into_a_pipe_prints_progress_lines_on_stderr_and_only_json_on_stdout():
    env = {**os.environ, EVERY_S: "0.001", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "apportion", "simulate", "-p", "las", "--jobs", "1000", "--json"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["policy"] == "las"
    lines = done.stderr.splitlines()
    assert len(lines) >= 2, done.stderr
    assert all(LINE.match(line) for line in lines), done.stderr
