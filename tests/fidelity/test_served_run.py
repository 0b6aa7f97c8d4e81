"""A state directory that is not a finished run gets one clear line, from the library and the command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.core.errors import InputError
from apportion.fidelity import read_served_run
from apportion.serve.store.state import StateStore


def replay_error(path) -> str:
    with pytest.raises(InputError) as raised:
        read_served_run(path)
    return str(raised.value)


def stored_job(path, status: str) -> None:
    store = StateStore(path / "state.db")
    store.set_run_settings({"policy": "fifo", "round_s": 10.0, "slots": [["cpu:0", "cpu"]]})
    job = store.insert_job(spec={"name": "a", "command": "x", "total_steps": 10}, name="a", user="ann", queue="q",
                           priority=1.0, kind="a", gpus=1, total_steps=10, submitted=100.0)
    store.update_job(job, status=status)
    store.close()


def test_a_missing_directory_is_named(tmp_path):
    assert replay_error(tmp_path / "nowhere") == (f"{tmp_path / 'nowhere'}: no such state directory (give the "
                                                  "--state-dir of a finished `apportion serve` run)")


def test_a_directory_without_a_state_file_is_not_a_run(tmp_path):
    assert "no state.db here" in replay_error(tmp_path)


def test_a_state_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path):
    (tmp_path / "state.db").write_text("not a database\n")

    assert "not an apportion state file" in replay_error(tmp_path)
    assert (tmp_path / "state.db").read_text() == "not a database\n"


def test_a_run_served_without_its_settings_recorded_is_refused(tmp_path):
    StateStore(tmp_path / "state.db").close()  # a state file with no server's settings in it

    assert "settings (policy, round length, slots) are not recorded" in replay_error(tmp_path)


def test_an_unfinished_run_is_refused(tmp_path):
    stored_job(tmp_path, "running")

    assert replay_error(tmp_path).endswith("the run has not finished: job 1 is running; replay it once every job has ended")


def test_a_run_where_no_job_completed_has_nothing_to_compare(tmp_path):
    stored_job(tmp_path, "cancelled")
    result = CliRunner().invoke(app, ["replay", str(tmp_path)])

    assert result.exit_code == 2
    assert "no job of the run completed" in result.stderr


def test_the_command_fails_in_one_line_with_exit_code_2(tmp_path):
    result = CliRunner().invoke(app, ["replay", str(tmp_path / "nowhere")])

    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'nowhere'}: no such state directory (give the "
                                                  "--state-dir of a finished `apportion serve` run)"]


def test_a_run_served_before_the_rule_was_recorded_replays_under_the_rule_it_ran_with(tmp_path):
    stored_job(tmp_path, "completed")

    assert read_served_run(tmp_path).settings.received_since == "arrival"  # the only rule servers had then


def test_an_unknown_setting_is_named():
    result = CliRunner().invoke(app, ["replay", ".", "--clock", "fast"])

    assert result.exit_code == 2
    assert "error: --clock must be one of wall, rounds, got 'fast'" in result.stderr
