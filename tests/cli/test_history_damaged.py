"""`apportion history --state-dir` on a damaged or hostile state file: every value it reads is
checked, and anything wrong is one line naming the file, the table, the row and the field, never
a traceback; a view (a recursive one never ends) is refused, every query has a time limit, and
what a job's name holds never reaches the terminal raw (apportion/serve/store/untrusted_state.py)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.serve.store.state import StateStore
from apportion.serve.store.untrusted_state import DamagedState, read_accounting

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def state_dir(tmp_path):
    """A state file with two jobs that ran once each (ids 1 and 2)."""
    store = StateStore(tmp_path / "state.db")
    for name in ("a", "b"):
        job_id = store.insert_job(spec={}, name=name, user="ann", queue="", priority=1.0, kind="k", gpus=1,
                                  total_steps=10, submitted=1000.0)
        store.attempt_started(job_id, 1, 1010.0, "v100", "gpu:0", None)
        store.attempt_ended(job_id, 1, 1100.0, 0, "completed")
        store.update_job(job_id, status="completed", started=1010.0, finished=1100.0, attempt=1, exit_code=0)
    store.close()
    return tmp_path


def damage(state_dir: Path, *sql: str) -> None:
    conn = sqlite3.connect(state_dir / "state.db")
    for statement in sql:
        conn.execute(statement)
    conn.commit()
    conn.close()


def history(state_dir: Path, *args: str):
    return runner.invoke(app, ["history", "--state-dir", str(state_dir), "--state", "all", *args])


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(" ".join(lines).split("error: ")) == 2 and "Traceback" not in result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("sql, says", [
    ("UPDATE jobs SET submitted = 'soon' WHERE id = 2",
     "table jobs, row id=2: field 'submitted' must be a time (Unix seconds, 0 to 1e+11), got 'soon'"),
    ("UPDATE jobs SET finished = 1e308 WHERE id = 1",
     "table jobs, row id=1: field 'finished' must be a time (Unix seconds, 0 to 1e+11), got 1e+308"),
    ("UPDATE jobs SET exit_code = 'x' WHERE id = 1",
     "table jobs, row id=1: field 'exit_code' must be an exit status (a whole number), got 'x'"),
    ("UPDATE jobs SET preemptions = -3 WHERE id = 2",
     "table jobs, row id=2: field 'preemptions' must be a whole number from 0 to 2^53, got -3"),
    ("UPDATE jobs SET name = X'4142' WHERE id = 1", "table jobs, row id=1: field 'name' must be text, got b'AB'"),
    ("UPDATE attempts SET started = 1e308 WHERE job_id = 2",
     "table attempts, row job_id=2, attempt=1: field 'started' must be a time (Unix seconds, 0 to 1e+11), got 1e+308"),
    ("UPDATE attempts SET ended = 'later' WHERE job_id = 1",
     "table attempts, row job_id=1, attempt=1: field 'ended' must be a time"),
])
def test_a_damaged_value_is_one_line_naming_the_file_table_row_and_field(state_dir, sql, says):
    damage(state_dir, sql)
    for args in ((), ("--json",), ("--by", "user")):
        shown = one_line_error(history(state_dir, *args))
        assert f"error: --state-dir {state_dir}: {state_dir}/state.db: {says}" in shown


def test_a_recursive_view_in_place_of_the_jobs_table_is_refused_at_once(state_dir):
    damage(state_dir, "ALTER TABLE jobs RENAME TO old_jobs",
           "CREATE VIEW jobs AS WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n) "
           "SELECT id, 'x' AS name, 'u' AS user, '' AS queue, 'completed' AS status, 1.0 AS submitted FROM n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "apportion", "history", "--state-dir", str(state_dir)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # a hang fails here
    assert time.monotonic() - started < 30
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{state_dir}/state.db: jobs is a view, not a table" in " ".join(done.stderr.split())


def test_a_computed_column_is_refused(state_dir):
    damage(state_dir, "ALTER TABLE jobs RENAME TO old_jobs",
           "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT, user TEXT, queue TEXT, status TEXT, "
           "submitted REAL GENERATED ALWAYS AS (length(zeroblob(1000000))) VIRTUAL)")
    assert "table jobs: column 'submitted' is computed, not stored" in one_line_error(history(state_dir))


def test_every_query_stops_at_its_time_limit(state_dir):
    damage(state_dir, *[f"INSERT INTO jobs (name, user, queue, priority, kind, gpus, total_steps, submitted, status, "
                        f"spec) SELECT name, user, queue, priority, kind, gpus, total_steps, submitted, status, spec "
                        f"FROM jobs" for _ in range(10)])  # 2,048 jobs: more than one check of the clock
    with pytest.raises(DamagedState, match="reading it took longer than 0 s"):
        read_accounting(state_dir / "state.db", time_limit_s=0.0)
    jobs, _ = read_accounting(state_dir / "state.db")
    assert len(jobs["id"]) == 2048


def test_escape_sequences_in_a_jobs_name_are_shown_escaped(state_dir):
    damage(state_dir, "UPDATE jobs SET name = 'cnn' || char(27) || ']0;pwned' || char(7) || char(155) WHERE id = 1",
           "UPDATE attempts SET gpu_type = 'v100' || char(27) || '[2J' WHERE job_id = 2")
    for args in ((), ("--csv",), ("--by", "type")):
        result = history(state_dir, *args)
        assert result.exit_code == 0, result.output
        assert not any(c in result.output for c in ("\x1b", "\x07", "\x9b")), repr(result.output)
    assert "cnn\\x1b]0;pwned\\x07\\x9b" in history(state_dir).output


def test_a_file_that_is_no_state_file_is_one_line(tmp_path):
    (tmp_path / "state.db").write_bytes(b"not a database" * 100)
    assert f"{tmp_path}/state.db: cannot read it as a state file (file is not a database)" in \
        one_line_error(history(tmp_path))


def test_two_jobs_with_one_id_are_refused(state_dir):
    damage(state_dir, "ALTER TABLE jobs RENAME TO old_jobs",
           "CREATE TABLE jobs AS SELECT * FROM old_jobs UNION ALL SELECT * FROM old_jobs")
    assert f"{state_dir}/state.db: table jobs: two rows have the same id" in one_line_error(history(state_dir))
