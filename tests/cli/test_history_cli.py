"""`apportion history --state-dir`: a state file's jobs and their accounting, read without the server
and without changing the file. (Through a running server: tests/serve/test_usage.py.)

The state file holds, from T0:
  job 1, ann, 1 v100, submitted at 0, ran 0-100 and 160-260 (preempted once), completed;
  job 2, bob, 2 k80s, queue research, submitted at 0, waited 30 s, ran 30-90, failed with exit 1;
  job 3, bob, never ran: cancelled at 50;
  job 4, ann, still waiting.
So ann has 200 GPU-seconds on v100, bob 120 on k80; the mean wait over the jobs that started is 15 s.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.serve.store.state import StateStore

REPO = Path(__file__).resolve().parents[2]
T0 = 1_000_000.0
runner = CliRunner()


def add_job(store, name, user, *, queue="", gpu_type="v100", slots=("gpu:0",), runs=(), status="completed",
            exit_code=None, reason="", preemptions=0, finished=None):
    job_id = store.insert_job(spec={}, name=name, user=user, queue=queue, priority=1.0, kind="k", gpus=len(slots),
                              total_steps=100, submitted=T0)
    for number, (start, end) in enumerate(runs, 1):
        store.attempt_started(job_id, number, T0 + start, gpu_type, ",".join(slots), None)
        store.attempt_ended(job_id, number, T0 + end, 0, "preempted" if number < len(runs) else status)
    ended = T0 + (finished if finished is not None else runs[-1][1]) if status in ("completed", "failed", "cancelled") else None
    store.update_job(job_id, status=status, started=T0 + runs[0][0] if runs else None, finished=ended,
                     attempt=len(runs), preemptions=preemptions, exit_code=exit_code, reason=reason)


@pytest.fixture
def state_dir(tmp_path):
    store = StateStore(tmp_path / "state.db")
    add_job(store, "a", "ann", runs=((0, 100), (160, 260)), preemptions=1, exit_code=0)
    add_job(store, "c", "bob", queue="research", gpu_type="k80", slots=("gpu:1", "gpu:2"), runs=((30, 90),),
            status="failed", exit_code=1, reason="exit 1 on attempt 1, after 0 retries")
    add_job(store, "b", "bob", status="cancelled", reason="cancelled by bob", finished=50)
    add_job(store, "d", "ann", status="queued")
    store.close()
    return tmp_path


def history(*args: str):
    return runner.invoke(app, ["history", *args])


def test_the_table_lists_finished_jobs_and_a_total_line(state_dir):
    result = history("--state-dir", str(state_dir))

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0].isdigit()}
    assert sorted(rows) == ["1", "2", "3"]  # job 4 still waits
    assert rows["1"].split()[1:8] == ["a", "ann", "-", "v100", "0.06", "0s", "3m20s"]
    assert "completed (exit 0)" in rows["1"]
    assert rows["2"].split()[1:8] == ["c", "bob", "research", "k80", "0.03", "30s", "1m00s"]
    assert "failed (exit 1): exit 1 on attempt 1" in rows["2"]
    assert "cancelled: cancelled by bob" in rows["3"]
    assert lines[-1] == ("total: 3 job(s), 0.09 GPU-hours (k80 0.03, v100 0.06), mean wait 15s, mean run 1m27s, "
                         "1 preemption(s), 1 failed")


def test_totals_by_user_and_the_same_as_json_and_csv(state_dir):
    table = history("--state-dir", str(state_dir), "--by", "user", "--state", "all")
    data = json.loads(history("--state-dir", str(state_dir), "--by", "user", "--state", "all", "--json").output)
    rows = list(csv.DictReader(io.StringIO(history("--state-dir", str(state_dir), "--by", "user", "--state", "all",
                                                   "--csv").output)))

    assert table.exit_code == 0, table.output
    assert [line.split()[:3] for line in table.output.splitlines()[2:4]] == [["ann", "2", "0.06"], ["bob", "2", "0.03"]]
    assert [(g["user"], g["jobs"], round(g["gpu_hours"] * 3600), g["failures"]) for g in data["groups"]] == \
        [("ann", 2, 200, 0), ("bob", 2, 120, 1)]
    assert [(r["user"], r["jobs"], r["gpu_hours_k80"], r["gpu_hours_v100"]) for r in rows] == \
        [("ann", "2", "0", str(round(200 / 3600, 6))), ("bob", "2", str(round(120 / 3600, 6)), "0")]


def test_a_long_list_shows_the_latest_rows_and_says_how_many_it_left_out(state_dir):
    result = history("--state-dir", str(state_dir), "--limit", "2")

    assert result.exit_code == 0, result.output
    assert "the latest 2 of 3 jobs shown (--limit 0: all" in result.output
    assert "total: 3 job(s)" in result.output.splitlines()[-1]


@pytest.mark.parametrize("args, says", [
    (("--since", "last week"), "--since: 'last week' is not a time: give an age such as 90s, 30m, 2h, 3d"),
    (("--until", "2026-11-31"), "--until: '2026-11-31' is not a time"),
    (("--state", "done"), "--state: 'done' is not a state: give one or more of queued, running"),
    (("--by", "gpu"), "--by: 'gpu' cannot group jobs: give one of user, type, queue"),
])
def test_a_bad_filter_is_one_line_naming_the_flag(state_dir, args, says):
    result = history("--state-dir", str(state_dir), *args)

    assert result.exit_code == 2
    assert says in " ".join(result.output.split())


def test_a_directory_without_a_state_file_is_named(tmp_path):
    result = history("--state-dir", str(tmp_path))

    assert result.exit_code == 2 and "no state file there (state.db)" in " ".join(result.output.split())


def test_reading_a_stopped_servers_directory_changes_nothing_there(state_dir):
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in state_dir.iterdir()}

    result = history("--state-dir", str(state_dir), "--state", "all")

    assert result.exit_code == 0, result.output
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in state_dir.iterdir()} == before


def test_reading_a_running_servers_state_file_never_blocks_its_writes(state_dir):
    server = StateStore(state_dir / "state.db")  # as a running server holds it
    try:
        with server.transaction():  # mid-write when the command reads
            server.add_event(T0, 1, "note", "written while history reads")
            done = subprocess.run([sys.executable, "-m", "apportion", "history", "--state-dir", str(state_dir),
                                   "--json"], capture_output=True, text=True, cwd=REPO, timeout=120,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        server.add_event(T0, 1, "note", "and after")
    finally:
        server.close()

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["jobs"] == 3


def test_a_server_that_ran_nothing_yet_has_no_jobs_to_show(tmp_path):
    StateStore(tmp_path / "state.db").close()

    table = history("--state-dir", str(tmp_path), "--by", "type")
    data = json.loads(history("--state-dir", str(tmp_path), "--json").output)

    assert table.exit_code == 0 and table.output.strip() == "no jobs match"
    assert data["matched"] == 0 and data["total"]["mean_wait_s"] is None
