"""A policy from outside apportion, by an installed package's entry point or by a file path, runs
in simulate, compare, sweep and serve exactly like a built-in, its options flags of each; a
broken one is named in one line and never stops the built-ins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_install import install
from typer.testing import CliRunner

from apportion.cli import app
from apportion.policies import make_policy
from apportion.policies.api import POLICY_API_VERSION

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
FLOOR = f"{EXAMPLES / 'throughput_floor.py'}:ThroughputFloor"
SMALL = ("-n", "12", "-c", "v100:4,k80:4")
GOOD = {"apportion.policies": {"smallest-first": "apportion_demo_plugins:SmallestFirst"}}


@pytest.fixture
def package(tmp_path, monkeypatch):
    """The demo package installed, declaring the policy smallest-first."""
    return install(tmp_path / "site", monkeypatch, GOOD)


def cli(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    return " ".join(line.strip() for line in lines)  # a terminal may wrap the one line


def test_a_packages_policy_runs_in_simulate_with_its_own_option(package):
    result = cli("simulate", "--policy", "smallest-first", "--smallest-by", "steps", *SMALL, "--json")

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["policy"] == "smallest-first" and summary["completed"] == 12


def test_a_packages_policy_and_a_files_run_in_compare_side_by_side_with_built_ins_in_other_processes(package):
    result = cli("compare", "--policies", f"fifo,smallest-first,{FLOOR}", "--workers", "3",
                 *SMALL, "--json")

    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["policies"]
    assert [r["policy"] for r in rows] == ["fifo", "smallest-first", FLOOR]
    assert all(r["completed"] == 12 for r in rows)


def test_a_packages_policy_and_a_files_run_in_a_sweep(package):
    result = cli("sweep", "--policies", f"smallest-first,{FLOOR}", "--seeds", "0", "--rates", "20", "--jobs", "8",
                 "--clusters", "v100:4,k80:4", "--workers", "2", "--json")

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert [row["policy"] for row in summary] == ["smallest-first", FLOOR]
    assert all(row["avg_jct_s"]["mean"] > 0 for row in summary)


def test_the_file_policys_option_reaches_it_and_is_checked():
    assert make_policy(FLOOR, floor=0.8).floor == 0.8
    result = cli("simulate", "--policy", FLOOR, "--floor", "3", *SMALL)
    assert "--floor must be between 0 and 1, got 3" in one_line_error(result)


def test_a_variant_of_a_plugins_policy_is_asked_for_after_its_name_and_pop_splits_an_lp_plugin(package, tmp_path):
    newest = tmp_path / "newest.py"
    newest.write_text("from apportion.policies.api import AGNOSTIC, OrderingPolicy\n\n\n"
                      "class Newest(OrderingPolicy):\n    options = (AGNOSTIC,)\n\n"
                      "    def rank_key(self, jobs, throughputs):\n        return -jobs.submit_time_s\n")

    policy = make_policy(f"{newest}:Newest:agnostic")
    assert policy.name == f"{newest}:Newest:agnostic" and policy.agnostic
    assert make_policy("smallest-first").name == "smallest-first"
    assert type(make_policy(FLOOR, partitions=2)).__name__ == "Partitioned"


def test_apportion_policies_lists_the_built_ins_and_the_packages_with_their_options(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, {"apportion.policies": {
        **GOOD["apportion.policies"], "smallest-entry": "apportion_demo_plugins:SMALLEST_AS_ENTRY"}})
    result = cli("policies", "--json")

    assert result.exit_code == 0, result.output
    policies = {p["name"]: p for p in json.loads(result.stdout)["policies"]}
    assert policies["fifo"]["source"] == "built-in"
    assert policies["max-min-fairness"]["lp"] and policies["max-min-fairness"]["space_sharing"]
    assert policies["goodput"]["elastic"] and not policies["fifo"]["elastic"]
    mine = policies["smallest-first"]
    assert mine["source"] == "entry point of apportion-demo-plugins 1.0"
    assert mine["summary"] == "the smallest job first (by GPUs or by steps), whole GPUs, preemptive"
    assert [o["flag"] for o in mine["options"]] == ["--smallest-by"]
    assert policies["smallest-entry"]["summary"] == "smallest first, declared as an entry"
    assert make_policy("smallest-entry", smallest_by="steps").smallest_by == "steps"
    table = cli("policies")
    assert "smallest-first" in table.output and "apportion-demo-plugins" in table.output


def test_the_help_of_the_commands_that_run_policies_names_the_packages_policy_and_its_flag(package):
    for command in ("simulate", "compare", "sweep"):
        result = cli(command, "--help")
        assert result.exit_code == 0
        assert "smallest-first" in result.output and "--smallest-by" in result.output
    assert "--smallest-by" in cli("serve", "--help-policy-options").output


def test_serve_runs_a_packages_policy_and_a_files_with_their_options(package, tmp_path, monkeypatch):
    import apportion.serve.app.server

    started = []
    monkeypatch.setattr(apportion.serve.app.server, "serve",
                        lambda options, slots, policy, *rest, sock=None, **kw: (started.append(policy),
                                                                                 sock and sock.close()))
    for args in (["--policy", "smallest-first", "--smallest-by", "steps"], ["--policy", FLOOR, "--floor", "0.9"]):
        result = cli("serve", "--port", "0", "--slots", "cpu:2", "--state-dir", str(tmp_path / "state"),
                     "--run-as", "server-user", *args)
        assert result.exit_code == 0, result.output
    assert (started[0].name, started[0].smallest_by) == ("smallest-first", "steps")
    assert (started[1].name, started[1].floor) == (FLOOR, 0.9)


def test_the_server_starts_jobs_as_a_file_policy_places_them(tmp_path):
    from apportion.executors.fake import FakeExecutor
    from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
    from apportion.serve.base.slots import parse_slots
    from apportion.serve.store.state import StateStore

    config = ServeConfig(state_dir=tmp_path, round_s=10.0, fill_gap_s=0.0, renew_wait_s=0.0)
    executor = FakeExecutor(tmp_path)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, parse_slots("cpu:2"),
                          make_policy(f"{EXAMPLES / 'equal_share.py'}:EqualShare"), config, clock=lambda: 1e6)
    for name in ("a", "b", "c"):
        scheduler.submit({"name": name, "command": "train", "total_steps": 100}, "ann")
    scheduler.tick()

    assert len(executor.started) == 2  # two slots, three jobs sharing them equally: two run this round


@pytest.mark.parametrize("entry_point, words", [
    ("apportion_demo_plugins.missing:Policy", "failed to import: ModuleNotFoundError"),
    ("apportion_demo_plugins:NOT_A_POLICY", "is a int, not a policy class or a PolicyEntry"),
    ("apportion_demo_plugins:NeedsNewerApi", f"needs policy API 99, this apportion has {POLICY_API_VERSION}"),
])
def test_a_broken_packages_policy_is_named_when_asked_for_and_skipped_when_listed(tmp_path, monkeypatch,
                                                                                  entry_point, words):
    install(tmp_path / "site", monkeypatch, {"apportion.policies": {"broken": entry_point, **GOOD["apportion.policies"]}})

    error = one_line_error(cli("simulate", "--policy", "broken", *SMALL))
    assert error.startswith("error: policy plugin 'broken' of apportion-demo-plugins 1.0") or \
        error.startswith("error: policy plugin broken (entry point of apportion-demo-plugins 1.0)")
    assert words in error
    listing = cli("policies", "--json")
    assert listing.exit_code == 0
    names = [p["name"] for p in json.loads(listing.stdout)["policies"]]
    assert "broken" not in names and "smallest-first" in names and "fifo" in names
    assert "warning: " in listing.stderr and "broken" in listing.stderr and "(skipped)" in listing.stderr
    assert cli("simulate", "--policy", "fifo", *SMALL).exit_code == 0  # the built-ins work on


def test_two_packages_declaring_one_name_and_a_package_taking_a_built_ins_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install(site, monkeypatch, {"apportion.policies": {"twice": "apportion_demo_plugins:SmallestFirst",
                                                       "fifo": "apportion_demo_plugins:SmallestFirst"}})
    install(site, monkeypatch, {"apportion.policies": {"twice": "apportion_demo_plugins:TooGenerous"}},
            name="other-plugins")

    error = one_line_error(cli("simulate", "--policy", "twice", *SMALL))
    assert "policy plugin 'twice': declared by several packages" in error
    listing = cli("policies", "--json")
    assert "several packages declare it" in listing.stderr and "the name is a built-in's" in listing.stderr
    sources = {p["name"]: p["source"] for p in json.loads(listing.stdout)["policies"]}
    assert sources["fifo"] == "built-in" and "twice" not in sources


def test_an_allocation_that_is_malformed_stops_the_run_with_the_plugins_name_not_a_traceback(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, {"apportion.policies": {"generous": "apportion_demo_plugins:TooGenerous"}})

    for command in (["simulate", "--policy", "generous"], ["compare", "--policies", "fifo,generous", "--workers", "1"]):
        error = one_line_error(cli(*command, *SMALL))
        assert "policy plugin generous: allocate() returned a job whose shares sum to 4, more than 1" in error


def test_a_broken_policy_file_is_named(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def oops(:\n")
    assert "policy plugin " + f"{bad}:Oops: failed to import: SyntaxError" in one_line_error(
        cli("simulate", "--policy", f"{bad}:Oops", *SMALL))
    assert f"none.py:X: no such file {tmp_path}/none.py" in one_line_error(
        cli("simulate", "--policy", f"{tmp_path}/none.py:X"))
    good = tmp_path / "good.py"
    good.write_text("X = 1\n")
    assert "good.py has no 'Missing'" in one_line_error(cli("simulate", "--policy", f"{good}:Missing", *SMALL))
    assert "is a int, not a policy class" in one_line_error(cli("simulate", "--policy", f"{good}:X", *SMALL))


def test_an_lp_plugin_is_shared_by_user_each_user_with_a_copy_that_checks_its_own_answers():
    import copy

    from apportion.policies.by_user import how_shared

    policy = make_policy(FLOOR)
    twin = copy.deepcopy(policy)
    assert how_shared(policy) == "split"
    assert twin.allocate.__self__ is twin and twin.next_change_s.__self__ is twin
    result = cli("simulate", "--policy", FLOOR, "--share-by-user", *SMALL, "--json")
    assert result.exit_code == 0, result.output


def test_serve_refuses_at_start_a_policy_whose_answer_is_malformed(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, {"apportion.policies": {"generous": "apportion_demo_plugins:TooGenerous"}})

    error = one_line_error(cli("serve", "--port", "0", "--slots", "cpu:2", "--state-dir", str(tmp_path / "state"),
                               "--run-as", "server-user", "--policy", "generous"))
    assert "policy plugin generous: allocate() returned a job whose shares sum to 2, more than 1" in error


def test_a_malformed_answer_in_a_running_servers_round_is_one_line_naming_the_plugin(tmp_path):
    from apportion.executors.fake import FakeExecutor
    from apportion.plugins import PluginError
    from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
    from apportion.serve.base.slots import parse_slots
    from apportion.serve.store.state import StateStore

    sometimes = tmp_path / "sometimes.py"
    sometimes.write_text("import math\nimport numpy as np\nfrom apportion.policies.api import Allocation\n\n\n"
                         "class Sometimes:\n    def allocate(self, jobs, cluster, throughputs):\n"
                         "        share = 2.0 if len(jobs.index) > 1 else 1.0\n"
                         "        return Allocation(jobs.index, np.full((len(jobs.index), len(cluster.gpu_types)), share))\n\n"
                         "    def next_change_s(self, jobs, running):\n        return math.inf\n")
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, fill_gap_s=0.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:2"),
                          make_policy(f"{sometimes}:Sometimes"), config, clock=lambda: 1e6)
    for name in ("a", "b"):
        scheduler.submit({"name": name, "command": "train", "total_steps": 100}, "ann")

    with pytest.raises(PluginError, match=r"^policy plugin .*sometimes.py:Sometimes: allocate\(\) returned a job "
                                          r"whose shares sum to 2, more than 1$"):
        scheduler.tick()  # the server's loop logs it as one line and goes on (Scheduler.run)


def test_a_server_config_file_names_a_plugin_policy_and_sets_its_option(tmp_path, monkeypatch):
    import apportion.serve.app.server

    started = []
    monkeypatch.setattr(apportion.serve.app.server, "serve",
                        lambda options, slots, policy, *rest, sock=None, **kw: (started.append(policy),
                                                                                 sock and sock.close()))
    config = tmp_path / "server.yaml"
    config.write_text(f"policy: {FLOOR}\nfloor: 0.9\nslots: cpu:2\nrun_as: server-user\nport: 0\n")
    result = cli("serve", "--config", str(config))

    assert result.exit_code == 0, result.output
    assert (started[0].name, started[0].floor) == (FLOOR, 0.9)
    config.write_text(f"slots: cpu:2\npolicy: {tmp_path}/none.py:X\n")
    assert f"server.yaml:2: field 'policy': policy plugin {tmp_path}/none.py:X: no such file" in one_line_error(
        cli("serve", "--config", str(config)))
