"""`apportion serve`'s budgets (--max-active-jobs, --submit-rate, …, and a config file's keys and
``user_budgets:``) reach the server, and a bad value is named as its flag or its file's line. The
server is a stand-in that keeps what it was given (tests/serve/test_budgets.py checks the budgets)."""

from __future__ import annotations


import pytest

from apportion.serve.accounts.budgets import Limits
from apportion.serve.app.settings import DEFAULTS, replace
from apportion.serve.app.settings_file import load_settings_file, settings_yaml

from serve_stand_in import config_file as write, serve, started  # noqa: F401 (a fixture)


def test_the_defaults_are_a_labs_and_the_flags_set_every_users_budgets(tmp_path, started):
    assert serve(tmp_path).exit_code == 0
    assert started[0].budgets.default == Limits(max_active_jobs=50_000, max_stored_mb=1000.0, max_demand_rows=1_000_000,
                                                max_after_edges=100_000, submit_rate=20.0, submit_burst=200)

    result = serve(tmp_path, "--max-active-jobs", "10", "--max-stored-mb", "5.5", "--max-demand-rows", "7",
                   "--max-after-edges", "8", "--submit-rate", "0.5", "--submit-burst", "3")

    assert result.exit_code == 0, result.output
    assert started[1].budgets.default == Limits(10, 5.5, 7, 8, 0.5, 3)


def test_the_config_file_sets_the_budgets_and_each_users_own_over_them(tmp_path, started):
    config = write(tmp_path, "max_active_jobs: 100\nsubmit_rate: 2\nuser_budgets:\n  ops: {max_active_jobs: 100000}\n"
                             "  carol:\n    submit_burst: 1\n")
    result = serve(tmp_path, "--config", str(config), "--submit-burst", "9")

    assert result.exit_code == 0, result.output
    rules = started[0].budgets
    assert (rules.default.max_active_jobs, rules.default.submit_rate, rules.default.submit_burst) == (100, 2.0, 9)
    assert rules.of("ops").max_active_jobs == 100_000 and rules.of("ops").submit_rate == 2.0
    assert rules.of("carol").submit_burst == 1 and rules.of("alice") == rules.default


@pytest.mark.parametrize("flags, message", [
    (("--max-active-jobs", "-1"), "--max-active-jobs must be a whole number from 0 up, got -1"),
    (("--submit-rate", "0"), "--submit-rate must be a positive number of submits a second, got 0"),
    (("--submit-rate", "nan"), "--submit-rate must be a finite number, got nan"),
    (("--submit-burst", "0"), "--submit-burst must be a whole number from 1 up, got 0"),
    (("--max-stored-mb", "-5"), "--max-stored-mb must be >= 0 (MB), got -5"),
])
def test_a_bad_flag_is_named(tmp_path, started, flags, message):
    result = serve(tmp_path, *flags)

    assert result.exit_code == 2 and not started
    assert result.output.strip() == f"error: {message}"


@pytest.mark.parametrize("text, message", [
    ("max_active_jobs: many\n", "1: field 'max_active_jobs': must be a whole number, got 'many'"),
    ("\nmax_stored_mb: big\n", "2: field 'max_stored_mb': must be a number of MB, got 'big'"),
    ("submit_rate: -1\n", "1: field 'submit_rate': must be a positive number of submits a second, got -1"),
    ("user_budgets: [alice]\n", "1: field 'user_budgets': must map users to their budgets"),
    ("user_budgets:\n  alice: 5\n", "1: field 'user_budgets': alice: must map budgets to numbers"),
    ("user_budgets:\n  alice: {max_jobs: 5}\n", "1: field 'user_budgets': alice: 'max_jobs' is no budget (known: "
                                                "max_active_jobs, max_stored_mb,"),
    ("user_budgets:\n  alice: {submit_burst: 2.5}\n", "1: field 'user_budgets': alice: submit_burst must be a whole "
                                                      "number, got 2.5"),
    ("round_s: 60\nuser_budgets:\n  alice: {submit_burst: 0}\n",
     "2: field 'user_budgets': alice: submit_burst must be a whole number from 1 up, got 0"),
])
def test_a_bad_key_in_the_file_is_named_with_its_line(tmp_path, started, text, message):
    result = serve(tmp_path, "--config", str(write(tmp_path, text)))

    assert result.exit_code == 2 and not started
    assert " ".join(result.output.split()).startswith(f"error: {tmp_path}/server.yaml:{message}"), result.output


def test_what_is_printed_reads_back_to_the_same_budgets(tmp_path):
    settings = replace(DEFAULTS, state_dir=tmp_path / "state", max_active_jobs=10, submit_rate=1.5,
                       user_budgets={"ops": {"max_active_jobs": 99}})
    read = load_settings_file(write(tmp_path, settings_yaml(settings)))

    assert replace(DEFAULTS, **read.values) == settings


def test_the_budget_settings_are_the_limits_each_user_has():
    from dataclasses import fields

    from apportion.serve.app.settings import BUDGETS

    assert BUDGETS == tuple(f.name for f in fields(Limits))
    assert Limits() == Limits.from_settings(DEFAULTS)
