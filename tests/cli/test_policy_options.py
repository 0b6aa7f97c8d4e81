"""Policy options declared once in the registry are flags of simulate, compare, sweep and serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.core.views import JobView, ThroughputView
from apportion.policies import OrderingPolicy
from apportion.policies.registry import AGNOSTIC, Option, PolicyEntry, register, unregister

runner = CliRunner()
COMMANDS = ("simulate", "compare", "sweep", "serve")
AS_ROOT = ("--run-as", "server-user") if os.geteuid() == 0 else ()  # a root server refuses to run jobs as root


def run(*args: str):
    return runner.invoke(app, list(args))


def help_text(command: str, flag: str | None = None) -> str:
    """``command``'s help of its policy options (``serve --help-policy-options``, the others' ``--help``)
    as one line of words: the panels' borders and line breaks gone."""
    flag = flag or ("--help-policy-options" if command == "serve" else "--help")
    result = runner.invoke(app, [command, flag], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())


class Oldest(OrderingPolicy):
    """First come, first served; keeps the options each instance was built with."""

    name = "oldest"
    built: list[dict] = []

    def __init__(self, **options) -> None:
        super().__init__(agnostic=options.get("agnostic", False))
        Oldest.built.append(options)

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        return jobs.submit_time_s


def _whole_minutes(value) -> float:
    if float(value) % 60:
        raise ValueError(f"must be whole minutes in seconds, got {value}")
    return float(value)


OLDEST = PolicyEntry(
    "oldest", Oldest, "first come, first served",
    options=(AGNOSTIC,
             Option("patience_s", float, "seconds a newcomer waits before it may preempt", 120.0, metavar="SECONDS",
                    check=_whole_minutes),
             Option("strict", bool, "never preempt a job", False)),
)


@pytest.fixture
def oldest():
    register(OLDEST)
    Oldest.built.clear()
    yield OLDEST
    unregister(OLDEST.name)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_registered_policys_options_are_on_every_commands_help(oldest, command):
    help = help_text(command)

    assert "--patience-s SECONDS oldest: seconds a newcomer waits before it may preempt. [default: 120.0]" in help
    assert "--strict oldest: never preempt a job." in help and "--no-strict" not in help


def test_serve_help_names_the_policy_options_and_leaves_their_help_to_its_own_flag(oldest):
    help = help_text("serve", "--help")

    assert "--help-policy-options Show the policy options and exit: --agnostic, --preemptive, --head-of-line," in help
    assert "--patience-s, --strict." in help
    assert "seconds a newcomer waits" not in help and "--water-filling raise" not in help


def test_serve_help_policy_options_shows_them_alone():
    help = help_text("serve")

    assert "--share-by gpu-time|rate max-min-fairness: what is made equal" in help
    assert "--policy -p" in help and "--state-dir" not in help and "--help-policy-options" not in help


@pytest.mark.parametrize("command", COMMANDS)
def test_the_goodput_options_are_on_every_commands_help(command):
    help = help_text(command)

    assert "--goodput-p" in help and "goodput: the generalised mean's exponent" in help
    assert "--goodput-exact" in help and "--no-goodput-exact" not in help


def test_an_option_every_policy_takes_names_none_and_one_some_take_names_them():
    help = help_text("simulate")

    assert "Treat every GPU type as equally fast (time shares only); or NAME:agnostic." in help
    assert "srtf, qssf, finish-time-fairness: what remaining durations" in help
    assert "LP policies: solve as K random sub-problems" in help


def test_simulate_passes_what_was_given_and_only_that_to_the_constructor(oldest):
    given = run("simulate", "--policy", "oldest", "--patience-s", "300", "--strict", "--jobs", "4", "--json")

    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["completed"] == 4
    assert Oldest.built and all(built == {"patience_s": 300.0, "strict": True} for built in Oldest.built)

    Oldest.built.clear()
    plain = run("simulate", "--policy", "oldest:agnostic", "--jobs", "4", "--json")

    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["policy"] == "oldest:agnostic"
    assert Oldest.built and all(built == {"agnostic": True} for built in Oldest.built)


def test_compare_passes_them_to_each_policy(oldest):
    result = run("compare", "--policies", "oldest,oldest:agnostic", "--patience-s", "60", "--jobs", "4",
                 "--workers", "1", "--json")

    assert result.exit_code == 0, result.output
    assert [s["policy"] for s in json.loads(result.stdout)["policies"]] == ["oldest", "oldest:agnostic"]
    assert {"patience_s": 60.0} in Oldest.built and {"patience_s": 60.0, "agnostic": True} in Oldest.built


def test_sweep_passes_them_to_every_replay(oldest):
    result = run("sweep", "--policies", "oldest", "--rates", "4,8", "--seeds", "0", "--jobs", "4", "--strict",
                 "--workers", "1", "--json")

    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["cells"]) == 2
    assert {"strict": True} in Oldest.built and all(built == {"strict": True} for built in Oldest.built)


@pytest.fixture
def served(monkeypatch):
    """``serve``'s arguments to the server, which is not started."""
    import apportion.serve.app.server

    calls = []
    monkeypatch.setattr(apportion.serve.app.server, "serve", lambda options, slots, policy, *rest, sock: calls.append(
        (options, policy)) or sock.close())
    return calls


def test_serve_builds_its_policy_with_them_and_records_them_for_a_replay(oldest, served, tmp_path):
    result = run("serve", "--port", "0", "--state-dir", str(tmp_path), "--slots", "cpu:1", "--policy", "oldest",
                 "--patience-s", "180", "--strict", *AS_ROOT)

    assert result.exit_code == 0, result.output
    [(options, policy)] = served
    assert policy.name == "oldest" and Oldest.built[-1] == {"patience_s": 180.0, "strict": True}
    assert options.policy_options == {"patience_s": 180.0, "strict": True}


def test_serve_records_a_queues_file_by_its_absolute_path(served, tmp_path, monkeypatch):
    (tmp_path / "queues.yaml").write_text("queues:\n  - name: research\n")
    monkeypatch.chdir(tmp_path)

    result = run("serve", "--port", "0", "--state-dir", str(tmp_path / "state"), "--slots", "cpu:2",
                 "--policy", "hierarchical", "--queues", "queues.yaml", "--las-thresholds", "60", *AS_ROOT)

    assert result.exit_code == 2
    assert "--las-thresholds applies to las only, not to 'hierarchical'" in result.output
    result = run("serve", "--port", "0", "--state-dir", str(tmp_path / "state"), "--slots", "cpu:2",
                 "--policy", "hierarchical", "--queues", "queues.yaml", *AS_ROOT)
    assert result.exit_code == 0, result.output
    [(options, policy)] = served
    assert options.policy_options == {"queues": str(tmp_path / "queues.yaml")}


@pytest.mark.parametrize("command, args", [
    ("simulate", ("--policy", "oldest", "--jobs", "4")),
    ("compare", ("--policies", "oldest", "--jobs", "4", "--workers", "1")),
    ("sweep", ("--policies", "oldest", "--rates", "4", "--seeds", "0", "--jobs", "4", "--workers", "1")),
    ("serve", ("--port", "0", "--policy", "oldest", "--slots", "cpu:1", *AS_ROOT)),
])
def test_a_bad_value_is_one_line_naming_the_flag(oldest, served, command, args, tmp_path):
    if command == "serve":
        args += ("--state-dir", str(tmp_path))

    checked = run(command, *args, "--patience-s", "90")
    typed = run(command, *args, "--patience-s", "soon")

    assert checked.exit_code == 2
    assert checked.output.strip() == "error: --patience-s must be whole minutes in seconds, got 90.0"
    assert typed.exit_code == 2 and "Invalid value for '--patience-s'" in typed.output
    assert Oldest.built == [] and served == []


def test_an_option_for_another_policy_is_refused_naming_it_and_the_policies_it_is_for(oldest):
    result = run("simulate", "--policy", "fifo", "--strict", "--jobs", "4")

    assert result.exit_code == 2
    assert "error: --strict applies to oldest only, not to 'fifo'" in result.output
    assert Oldest.built == []


def test_the_goodput_options_reach_goodput():
    result = run("simulate", "--policy", "goodput", "--goodput-p", "2", "--jobs", "4")

    assert result.exit_code == 2
    assert "error: --goodput-p must be a number <= 1, got 2.0" in result.output


def test_an_option_spelled_like_a_commands_own_flag_is_one_line():
    clash = PolicyEntry("seeded", Oldest, "first come, first served",
                        options=(Option("seed", int, "a seed of its own", 0),))
    register(clash)
    try:
        result = run("simulate", "--policy", "seeded")
    finally:
        unregister(clash.name)

    assert result.exit_code == 2
    assert result.output.strip() == ("error: the policy option --seed (seeded) is spelled like an option of the "
                                     "command itself: give it another flag in its PolicyEntry")


def test_a_command_that_runs_no_policy_never_loads_the_registry():
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from apportion.cli import app\n"
            "for args in (['queue', '--help'], ['--help'], ['simulate', '--help']):\n"
            "    CliRunner().invoke(app, args)\n"
            "    print(args[0], 'apportion.policies.registry' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert out.split("\n")[:3] == ["queue False", "--help False", "simulate True"]


def test_a_policy_spec_with_variants_still_works_beside_the_flags():
    result = run("simulate", "--policy", "max-min-fairness:space-sharing", "--agnostic", "--jobs", "4", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == "max-min-fairness:agnostic:space-sharing"
