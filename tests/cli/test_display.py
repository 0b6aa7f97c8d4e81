"""What the commands print: user strings as typed (never as rich markup), tables whole in a
pipe, progress only on a terminal, and a bad --out refused before any work."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from apportion.arguments import out_dir_problem
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
                                                                  reason="[bold]Traceback", last_lines="[bold]x")]
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
    assert out_dir_problem(tmp_path / "a" / "b") is None
    assert out_dir_problem(tmp_path) is None


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


def many_jobs(running: int, waiting: int) -> list[dict]:
    return ([job_row(id=str(i), status="running", alloc=f"gpu:{i}") for i in range(1, running + 1)]
            + [job_row(id=str(i), reason="waiting for slots") for i in range(running + 1, running + waiting + 1)])


def serve_rows(monkeypatch, rows: list[dict]) -> None:
    """The client answers as a server holding ``rows`` would (status, limit; nothing ended)."""

    def jobs(self, status=None, user=None, limit=None, ended_after=None, array=None):
        chosen = [j for j in rows if status is None or j["status"] in status.split(",")]
        return chosen[:limit] if limit else chosen

    def jobs_text(self, status=None, user=None, ended_after=None, array=None):  # queue --json: the pages as sent
        return json.dumps(jobs(self, status, user, None, ended_after, array))

    counts = {s: sum(j["status"] == s for j in rows) for s in ("queued", "running", "preempted", "completed",
                                                                 "failed", "cancelled")}
    monkeypatch.setattr(Client, "jobs", jobs)
    monkeypatch.setattr(Client, "jobs_text", jobs_text)
    monkeypatch.setattr(Client, "status", lambda self: {"counts": counts})


def test_queue_lists_the_running_and_the_first_50_waiting_and_counts_the_others(monkeypatch):
    serve_rows(monkeypatch, many_jobs(running=5, waiting=115))

    lines = run("queue").stdout.splitlines()

    ids = [line.split()[0] for line in lines[2:-1]]
    assert ids == [str(i) for i in range(1, 56)]  # 5 running, then the first 50 waiting, by id
    assert lines[-1] == "… and 65 more waiting (--all)"
    assert len(run("queue", "--all").stdout.splitlines()) == 2 + 120
    assert [j["id"] for j in json.loads(run("queue", "--json").stdout)] == [str(i) for i in range(1, 121)]


def test_queue_with_few_waiting_lists_them_all_without_a_count(monkeypatch):
    serve_rows(monkeypatch, many_jobs(running=2, waiting=50))
    lines = run("queue").stdout.splitlines()
    assert len(lines) == 2 + 52 and "more waiting" not in lines[-1]


def status_of(slots: list[dict]) -> dict:
    return {"server": "http://127.0.0.1:8642", "policy": "las", "round": 7, "round_s": 5.0, "next_round_in_s": 3.0,
            "state_dir": "/srv/apportion", "pid": 1, "slots": slots, "hangs": 0,
            "counts": {s: 0 for s in ("queued", "running", "preempted", "completed", "failed", "cancelled")},
            "round_ms": {"last": 1.0, "median": 1.0, "rounds_this_run": 7}}


def test_status_counts_the_slots_of_each_type_on_a_large_cluster_and_names_them_with_slots(monkeypatch):
    slots = [{"id": f"gpu:{k}", "gpu_type": "v100" if k < 20 else "a100", "job": str(k) if k % 2 else None}
             for k in range(30)]
    monkeypatch.setattr(Client, "status", lambda self: status_of(slots))

    summary = run("status").stdout.splitlines()[2]
    listed = run("status", "--slots").stdout.splitlines()[2]

    assert summary == "slots: v100: 20 (10 busy), a100: 10 (5 busy) (--slots names each)"
    assert listed.startswith("slots: gpu:0(v100)=idle, gpu:1(v100)=job 1, ") and listed.endswith("gpu:29(a100)=job 29")


def test_status_names_each_slot_of_a_small_cluster(monkeypatch):
    slots = [{"id": "cpu:0", "gpu_type": "cpu", "job": "3"}, {"id": "cpu:1", "gpu_type": "cpu", "job": None}]
    monkeypatch.setattr(Client, "status", lambda self: status_of(slots))
    assert run("status").stdout.splitlines()[2] == "slots: cpu:0(cpu)=job 3, cpu:1(cpu)=idle"


def test_status_of_a_rented_cluster_shows_what_it_holds_and_the_dollars_spent(monkeypatch):
    slots = [{"id": "v100:0", "gpu_type": "v100", "job": "1"}, {"id": "v100:1", "gpu_type": "v100", "job": None}]
    rented = {"provisioning": "spot-fallback", "held": {"aws/us-east-1/p3.2xlarge/spot": 1}, "online": {"v100": 1},
              "usd": {"aws/us-east-1/p3.2xlarge/spot": 1.8, "aws/us-east-1/p3.2xlarge/on-demand": 3.06},
              "usd_total": 4.86}
    monkeypatch.setattr(Client, "status", lambda self: {**status_of(slots), "rented": rented})

    assert "rented (spot-fallback): held aws/us-east-1/p3.2xlarge/spot ×1; $4.86 spent (aws/us-east-1/p3.2xlarge/spot:"\
           " $1.80, aws/us-east-1/p3.2xlarge/on-demand: $3.06)" in run("status").stdout.splitlines()


def test_status_says_what_the_jobs_on_the_slots_asked_of_the_node_only_when_they_asked(monkeypatch):
    slots = [{"id": "cpu:0", "gpu_type": "cpu", "job": "3"}]
    node = {"cores": 8, "memory_gib": 31.25, "cpus_asked": 6.0, "memory_gb_asked": 0.0}
    monkeypatch.setattr(Client, "status", lambda self: {**status_of(slots), "node": node})
    assert "asked by the jobs on its slots: 6 of 8 cores, 0 of 31.25 GiB" in run("status").stdout.splitlines()
    monkeypatch.setattr(Client, "status", lambda self: {**status_of(slots), "node": {**node, "cpus_asked": 0.0}})
    assert "asked by" not in run("status").stdout
