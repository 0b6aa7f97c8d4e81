"""What the commands print: user strings as typed (never as rich markup), tables whole in a
pipe, progress only on a terminal, and a bad --out refused before any work."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from apportion.cli import app, output
from apportion.report.tables import summary_table
from apportion.serve.client import Client, ClientError

runner = CliRunner()
MARKUP = "[blink]root[/blink]"


def run(*args: str):
    return runner.invoke(app, list(args))


def job_row(**fields) -> dict:
    row = {"id": "1", "name": "cnn", "user": "ann", "queue": "", "priority": 1.0, "status": "queued", "reason": "",
           "gpus": 1, "alloc": "", "submitted": 0.0, "finished": None, "runtime_s": None, "steps_done": 0,
           "total_steps": 10, "last_lines": ""}
    return {**row, **fields}


def test_queue_prints_names_and_users_as_typed_and_cuts_a_huge_one(monkeypatch):
    rows = [job_row(name=MARKUP, user="[red]mallory"), job_row(id="2", user="u" * 10_000_000, status="failed",
                                                                  last_lines="[bold]Traceback")]
    monkeypatch.setattr(Client, "jobs", lambda self: rows)
    result = run("queue", "--all")
    assert result.exit_code == 0, result.output
    assert MARKUP in result.stdout and "[red]mallory" in result.stdout and "[bold]Traceback" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 400  # the 10 MB user is cut in its cell


def test_submit_and_cancel_print_names_and_server_errors_as_typed(monkeypatch, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(f"name: '{MARKUP}'\ncommand: x\ntotal_steps: 3\nuser: '[red]ann'\n")
    monkeypatch.setattr(Client, "submit", lambda self, spec, user: {"id": "7", "user": user})
    submitted = run("submit", str(job))
    assert submitted.stdout.strip() == f"submitted job 7: {MARKUP} ([red]ann, 1 slot(s), 3 steps)"

    def refuse(self, job_id, user):
        raise ClientError(f"job 1 belongs to '{MARKUP}', not 'bob'")

    monkeypatch.setattr(Client, "cancel", refuse)
    refused = run("cancel", "1", "--user", "bob")
    assert refused.exit_code == 2 and refused.stderr.strip() == f"error: job 1 belongs to '{MARKUP}', not 'bob'"


def test_a_summary_table_heads_its_columns_with_the_policy_as_typed():
    console = Console(file=io.StringIO(), width=200)
    console.print(summary_table([{"policy": "[red]fifo", "jobs": 3}]))
    assert "[red]fifo" in console.file.getvalue()


def test_a_table_into_a_pipe_is_never_cut():
    result = run("compare", "--policies", "max-min-fairness,finish-time-fairness,max-min-fairness:agnostic",
                 "--jobs", "12")
    assert result.exit_code == 0, result.output
    assert "finish-time-fairness" in result.stdout and "max-min-fairness:agnostic" in result.stdout
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) > 80


def test_a_long_line_into_a_pipe_stays_whole(monkeypatch):
    server = "http://" + "scheduler-" * 10 + ".example:8642"
    status = {"server": server, "policy": "las", "round": 7, "round_s": 5.0, "next_round_in_s": 3.0,
              "state_dir": "/srv/apportion", "pid": 1, "slots": [], "hangs": 0,
              "counts": {s: 0 for s in ("queued", "running", "preempted", "completed", "failed", "cancelled")},
              "round_ms": {"last": 1.0, "median": 1.0, "rounds_this_run": 7}}
    monkeypatch.setattr(Client, "status", lambda self: status)

    result = run("status")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"{server}: policy las, round 7 (every 5 s, next decided in 3 s)"


@pytest.mark.parametrize("make, words", [
    (lambda tmp: (tmp / "taken").write_text("x") and tmp / "taken", "exists and is not a directory"),
    (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "runs", "is not a directory"),
])
def test_an_out_that_cannot_be_written_is_refused_before_the_replay(tmp_path, make, words):
    out = make(tmp_path)
    for command in (("simulate",), ("compare", "--policies", "fifo,las")):
        result = run(*command, "--out", str(out))
        assert result.exit_code == 2 and words in result.stderr and "Traceback" not in result.output
        assert result.stdout == ""  # refused before the replay: no table was printed


def test_an_out_that_does_not_exist_yet_is_fine(tmp_path):
    assert output.out_dir_problem(tmp_path / "a" / "b") is None
    assert output.out_dir_problem(tmp_path) is None


def test_progress_is_a_bar_only_on_a_terminal_without_json_and_plain_lines_elsewhere(monkeypatch):
    from rich.progress import Progress, TimeRemainingColumn

    from apportion.cli.progress import ProgressLines

    assert isinstance(output.progress_bar(), ProgressLines)  # the tests' stdout and stderr are not terminals
    monkeypatch.setattr(output, "errors", Console(file=io.StringIO(), force_terminal=True))
    monkeypatch.setattr(output, "console", Console(file=io.StringIO(), force_terminal=True))
    bar = output.progress_bar()
    assert isinstance(bar, Progress) and any(isinstance(c, TimeRemainingColumn) for c in bar.columns)  # an ETA
    assert isinstance(output.progress_bar(as_json=True), ProgressLines)
    monkeypatch.setattr(output, "console", Console(file=io.StringIO(), force_terminal=False))  # stdout piped
    assert isinstance(output.progress_bar(), ProgressLines)


def test_a_replay_into_a_pipe_prints_no_progress():
    result = run("simulate", "--jobs", "12")
    assert result.exit_code == 0 and result.stderr == ""
