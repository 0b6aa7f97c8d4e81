"""What users typed never drives the terminal of whoever reads it: escape sequences, C1 controls
and bidi overrides in job names, reasons, log lines and history rows are printed as visible
escapes (``\\x1b``), in tables, plain lines, CSV and JSON alike (apportion/cli/safe_text.py)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from apportion.cli import app
from apportion.cli.safe_text import log_text, printable
from apportion.serve.client import Client

runner = CliRunner()
TITLE = "\x1b]0;pwned\x07"  # retitles the window
CLEAR = "\x1b[2J"  # clears the screen
CSI = "\x9b31m"  # a C1 CSI, as some terminals read it
RTL = "\u202e"  # reverses what follows
HOSTILE = f"cnn{TITLE}{CLEAR}{CSI}{RTL}gpj.exe"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def run(*args: str):
    return runner.invoke(app, list(args), env={"APPORTION_TOKEN": None})


def job_row(**fields) -> dict:
    row = {"id": "1", "name": "cnn", "user": "ann", "queue": "", "priority": 1.0, "status": "queued", "reason": "",
           "gpus": 1, "alloc": "", "submitted": 0.0, "finished": None, "runtime_s": None, "steps_done": 0,
           "total_steps": 10, "last_lines": ""}
    return {**row, **fields}


def assert_safe(text: str) -> None:
    assert not any(c in text for c in RAW), repr(text)


def test_control_characters_are_shown_as_escapes():
    assert printable(HOSTILE) == "cnn\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202egpj.exe"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable("two\nlines", lines=False) == "two\\nlines"
    assert log_text("10%\r20%\r\ndone\x1b[0m\n") == "10%\n20%\ndone\\x1b[0m\n"


def test_queue_escapes_names_users_reasons_and_last_lines(monkeypatch):
    rows = [job_row(name=HOSTILE, user=f"ann{CLEAR}", reason=f"why{TITLE}"),
            job_row(id="2", status="failed", reason=f"exit 1{CSI}", last_lines=f"Traceback{CLEAR}\nboom{RTL}")]
    monkeypatch.setattr(Client, "jobs", lambda self, **chosen: rows)
    result = run("queue", "--all")
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert "cnn\\x1b]0;pwned\\x07" in result.stdout and "exit 1\\x9b31m" in result.stdout


def test_queue_json_writes_c1_controls_and_bidi_overrides_as_json_escapes(monkeypatch):
    monkeypatch.setattr(Client, "jobs_text", lambda self, **chosen: json.dumps([job_row(name=HOSTILE)],
                                                                              ensure_ascii=False))
    result = run("queue", "--json")
    assert result.exit_code == 0, result.output
    assert_safe(result.stdout)
    assert json.loads(result.stdout)[0]["name"] == HOSTILE  # the data itself is whole


def test_logs_escape_the_jobs_output_and_its_headers_unless_raw(monkeypatch):
    chunks = [(1, f"epoch 1{TITLE}\n10%\r"), (1, "\n"), (2, f"{CLEAR}step 2\r"), (3, "done\r")]
    monkeypatch.setattr(Client, "log_chunks", lambda self, job_id, attempt, follow: iter(chunks))
    monkeypatch.setattr(Client, "job", lambda self, job_id: {"id": f"7{CLEAR}", "data_stall": 0.25})
    result = run("logs", "7")
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert result.stdout == "epoch 1\\x1b]0;pwned\\x07\n10%\n\\x1b[2Jstep 2\ndone\n"  # a split \r\n: one line break
    assert "--- job 7\\x1b[2J waited for data 25%" in result.stderr

    raw = run("logs", "7", "--raw")
    assert raw.stdout.startswith(f"epoch 1{TITLE}\n10%") and f"{CLEAR}step 2" in raw.stdout  # as written


def test_history_escapes_rows_in_its_table_and_csv(monkeypatch):
    job = {"id": "1", "name": HOSTILE, "user": f"ann{CSI}", "queue": "", "status": "failed", "exit_code": 1,
           "reason": f"boom{TITLE}", "gpu_types": [f"v100{CLEAR}"], "gpu_hours": {f"v100{CLEAR}": 1.0},
           "gpu_hours_total": 1.0, "wait_s": 1.0, "run_s": 3600.0, "attempts": 1, "preemptions": 0,
           "submitted": 0.0, "started": 1.0, "finished": 3601.0}
    total = {"jobs": 1, "gpu_hours": 1.0, "gpu_hours_by_type": {f"v100{CLEAR}": 1.0}, "mean_wait_s": 1.0,
             "mean_run_s": 3600.0, "preemptions": 0, "failures": 1}
    monkeypatch.setattr(Client, "history", lambda self, **kw: {"jobs": [job], "matched": 1, "total": total})
    for args in ((), ("--csv",)):
        result = run("history", *args)
        assert result.exit_code == 0, result.output
        assert_safe(result.output)
        assert "v100\\x1b[2J" in result.stdout


def test_an_error_from_the_server_is_escaped(monkeypatch):
    from apportion.serve.client import ClientError

    def refuse(self, job_id, user):
        raise ClientError(f"job 1 belongs to 'mallory{TITLE}', not 'bob'")

    monkeypatch.setattr(Client, "cancel", refuse)
    result = run("cancel", "1", "--user", "bob")
    assert result.exit_code == 2
    assert_safe(result.output)
    assert "mallory\\x1b]0;pwned\\x07" in result.stderr
