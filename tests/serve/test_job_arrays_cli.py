"""Job arrays as a user meets them on the command line: `apportion submit` of a file with
``array:``, `queue` showing the array as one line (and its tasks on request), `cancel` of the
array; against a real HTTP server whose jobs are fake, and one real `apportion serve` whose
tasks are processes printing their index."""

from __future__ import annotations

import json
import re
import sys

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from live_server import LiveServer
from serve_helpers import CONTRACT_JOB, Server, all_done, wait_for

runner = CliRunner()


@pytest.fixture
def server(tmp_path):
    live = LiveServer(tmp_path / "state", slots="cpu:2").start()
    yield live
    live.stop()


def cli(server, *args: str):
    return runner.invoke(app, [*args, "--server", server.url])


def job_file(tmp_path, array: str):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: sweep\ncommand: python train.py\ntotal_steps: 100\nuser: ann\narray: {array}\n")
    return path


def test_an_array_is_one_line_of_the_queue_until_asked_for_its_tasks(server, tmp_path):
    submitted = cli(server, "submit", str(job_file(tmp_path, "0-3")))
    assert submitted.exit_code == 0, submitted.output
    array_id = int(re.search(r"submitted array (\d+): sweep\[0-3\] \(ann, 4 tasks: jobs (\d+)-(\d+)", submitted.output)
                   .group(1))
    assert f"jobs {array_id + 1}-{array_id + 4}" in submitted.output

    wait_for(lambda: [server.status_of(array_id + 1 + i) for i in range(4)].count("running") == 2, 10,
             "two tasks to start on the two slots")

    table = cli(server, "queue").output
    lines = [line for line in table.splitlines() if "sweep" in line]
    assert len(lines) == 1, table
    assert re.search(rf"{array_id}\[0-3\]\s+sweep\s+ann\s+-\s+1\s+running 2, queued 2\(\[2\] waiting for slots\)"
                     r"\s+1\s+cpu:\d,cpu:\d", lines[0]), table
    assert "0/400 (0%)" in lines[0]

    expanded = cli(server, "queue", "--expand").output
    assert [re.search(r"sweep\[\d\]", line).group(0) for line in expanded.splitlines() if "sweep[" in line] == [
        f"sweep[{i}]" for i in range(4)]
    only = cli(server, "queue", "--array", str(array_id)).output
    assert sum("sweep[" in line for line in only.splitlines()) == 4

    listed = json.loads(cli(server, "queue", "--json").output)
    assert [(j["id"], j["array_id"], j["array_index"]) for j in listed] == [
        (str(array_id + 1 + i), str(array_id), i) for i in range(4)]


def test_cancel_of_an_arrays_id_cancels_its_tasks_and_says_how_many(server, tmp_path):
    array_id = int(re.search(r"submitted array (\d+)", cli(server, "submit", str(job_file(tmp_path, "1,3,5-7")))
                             .output).group(1))
    one = cli(server, "cancel", str(array_id + 1), "--user", "ann")
    assert one.exit_code == 0 and f"cancelled job {array_id + 1}" in one.output

    rest = cli(server, "cancel", str(array_id), "--user", "ann")

    assert rest.exit_code == 0 and f"cancelled array {array_id}: 4 tasks" in rest.output
    assert {server.status_of(array_id + 1 + i) for i in range(5)} == {"cancelled"}
    assert "cancelled 5" in cli(server, "queue").output


def test_a_malformed_range_is_named_with_its_line_in_the_job_file(server, tmp_path):
    path = job_file(tmp_path, "4-2")
    result = cli(server, "submit", str(path))
    assert result.exit_code != 0
    assert f"{path}:5: field 'array': the range 4-2 runs backwards" in result.output


def test_each_task_of_a_real_array_runs_with_its_own_index(tmp_path):
    path = tmp_path / "echo.yaml"
    path.write_text(f"name: echo\ncommand: echo index=$APPORTION_ARRAY_INDEX of $APPORTION_ARRAY_COUNT && exec "
                    f"{sys.executable} {CONTRACT_JOB}\ntotal_steps: 5\nuser: ann\narray: 0-3\n")
    with Server(tmp_path / "state", "--slots", "cpu:2", "--round-s", "2") as server:
        submitted = runner.invoke(app, ["submit", str(path), "--server", server.url])
        assert submitted.exit_code == 0, submitted.output
        array_id = int(re.search(r"submitted array (\d+)", submitted.output).group(1))
        jobs = wait_for(lambda: all_done(server, 4), 60, "the four tasks to end", server)
        logs = {j["array_index"]: runner.invoke(app, ["logs", j["id"], "--server", server.url]).output for j in jobs}

    assert {j["status"] for j in jobs} == {"completed"} and {j["array_id"] for j in jobs} == {str(array_id)}
    assert [re.search(r"index=(\d+) of (\d+)", logs[i]).groups() for i in range(4)] == [(str(i), "4") for i in range(4)]
