"""A provisioning policy, a privacy policy, a workload reader and an executor from outside apportion:
each works where the built-ins are named, and a broken one is named in one line."""

from __future__ import annotations

import csv
import json

import pytest
from plugin_install import install
from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()
DEMO = "apportion_demo_plugins"


@pytest.fixture
def package(tmp_path, monkeypatch):
    return install(tmp_path / "site", monkeypatch, {
        "apportion.provisioning": {"first-type": f"{DEMO}:RentTheFirstType", "senseless": f"{DEMO}:RentNothingSensible"},
        "apportion.privacy": {"biggest-first": f"{DEMO}:BiggestFirst", "forgetful": f"{DEMO}:ForgetfulPrivacy",
                              "not-one": f"{DEMO}:read_jsonl"},
        "apportion.workloads": {"jsonl": f"{DEMO}:read_jsonl", "offline": f"{DEMO}:read_and_fail"},
        "apportion.executors": {"demo": f"{DEMO}:DemoExecutor", "number": f"{DEMO}:NOT_A_POLICY"},
    })


def cli(*args: str):
    return runner.invoke(app, list(args))


def error_of(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(line.strip() for line in result.output.strip().splitlines())


def test_a_packages_provisioning_policy_rents_and_a_senseless_one_is_named(package):
    result = cli("compare", "--market", "synthetic", "-n", "10", "--provisioning", "static,first-type", "--json")
    assert result.exit_code == 0, result.output
    assert [p["completed"] for p in json.loads(result.stdout)["policies"]] == [10, 10]

    error = error_of(cli("simulate", "--market", "synthetic", "-n", "10", "--provisioning", "senseless"))
    assert "provisioning policy 'senseless' chose an instance type that does not exist" in error
    assert "--provisioning: unknown policy 'nowhere'" in error_of(
        cli("simulate", "--market", "synthetic", "--provisioning", "nowhere"))


@pytest.fixture
def claims(tmp_path):
    blocks = tmp_path / "blocks.csv"
    blocks.write_text("block,arrival_s,epsilon,delta\nb0,0,1.0,1e-6\n")
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,kind,steps,privacy_blocks,privacy_epsilon\n"
                     "s1,0,100,1,resnet50/bs64,300,b0,0.3\ns2,0,100,1,resnet50/bs64,300,b0,0.3\n"
                     "big,0,100,1,resnet50/bs64,300,b0,0.6\n")
    return ["-w", str(trace), "-c", "v100:4", "--blocks", str(blocks)]


def test_a_packages_privacy_policy_grants_in_its_own_order(package, claims, tmp_path):
    def granted(policy: str) -> list[str]:
        out = tmp_path / policy
        result = cli("simulate", *claims, "--privacy-policy", policy, "-o", str(out))
        assert result.exit_code == 0, result.output
        return [row["job_id"] for row in csv.DictReader((out / "jobs.csv").open()) if row["privacy_claim"] == "granted"]

    assert sorted(granted("biggest-first")) == ["big", "s1"]  # 0.6 first, then one 0.3 fits in the 0.4 left
    assert sorted(granted("fcfs")) == ["s1", "s2"]  # in arrival order: the 0.6 no longer fits


def test_a_broken_privacy_policy_is_named(package, claims):
    error = error_of(cli("simulate", *claims, "--privacy-policy", "forgetful"))
    assert "privacy plugin 'forgetful'" in error or "privacy plugin forgetful" in error
    assert "order() returned claims that are not the waiting ones" in error
    assert "is not a subclass of apportion.mechanism.privacy_policies.PrivacyPolicy" in error_of(
        cli("simulate", *claims, "--privacy-policy", "not-one"))


def test_a_packages_workload_reader_and_a_files_read_a_trace_with_apportions_checks(package, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"job_id": f"j{i}", "submit_time_s": 60 * i, "num_gpus": 1, "duration_s": 600}) + "\n"
                             for i in range(5)))
    reader = tmp_path / "reader.py"
    reader.write_text(f"from {DEMO} import read_jsonl as read\n")
    for workload in (f"jsonl:{trace}", f"{reader}:read:{trace}"):
        result = cli("simulate", "-w", workload, "-c", "v100:4", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["completed"] == 5

    trace.write_text(trace.read_text() + json.dumps({"job_id": "j5", "submit_time_s": 1, "num_gpus": "two", "duration_s": 6}) + "\n")
    error = error_of(cli("simulate", "-w", f"jsonl:{trace}"))
    assert f"{trace} (read by jsonl):6: field 'num_gpus'" in error
    assert (f"workload plugin offline (entry point of apportion-demo-plugins 1.0): reading {trace} failed: "
            "OSError: cannot reach the trace server") in error_of(cli("simulate", "-w", f"offline:{trace}"))


def test_serve_takes_a_packages_executor_and_names_a_broken_one(package, tmp_path, monkeypatch):
    import apportion.serve.app.server

    given = []
    monkeypatch.setattr(apportion.serve.app.server, "serve",
                        lambda options, slots, policy, log, ready=None, executor=None, sock=None:
                        (given.append(executor), sock and sock.close()))
    base = ("serve", "--port", "0", "--slots", "cpu:2", "--state-dir", str(tmp_path / "state"), "--run-as",
            "server-user")
    assert cli(*base, "--executor", "demo").exit_code == 0
    assert type(given[0]).__name__ == "DemoExecutor" and [s.id for s in given[0].slots] == ["cpu:0", "cpu:1"]

    assert "--executor: executor plugin number (entry point of apportion-demo-plugins 1.0): is a int" in error_of(
        cli(*base, "--executor", "number"))
    assert "--executor must be local, ray or slurm, got 'elsewhere' (or a plugin's name" in error_of(
        cli(*base, "--executor", "elsewhere"))
    assert cli(*base, "--policy", "fifo").exit_code == 0  # the built-in executor works on
    assert given[-1] is None
