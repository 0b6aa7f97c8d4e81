"""`apportion simulate/compare --policy hierarchical --queues FILE` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "queues.yaml"


def run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(
        "job_id,submit_time_s,duration_s,num_gpus,kind,steps,queue,user\n"
        "a1,0,100,1,resnet50/bs64,3000,research,ann\n"
        "a2,0,100,2,transformer/bs64,1500,research,bob\n"
        "b1,0,100,1,resnet50/bs64,3000,prod,\n"
        "b2,50,100,1,resnet50/bs64,1000,prod,\n"
        "c1,400,100,1,resnet50/bs64,2000,,\n"
    )
    return path


@pytest.fixture
def queues(tmp_path: Path) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(
        "queues:\n"
        "  - name: research\n    weight: 2\n    nominal: {v100: 2}\n"
        "  - name: prod\n    weight: 1\n    policy: fifo\n"
    )
    return path


def test_simulate_hierarchical_with_a_queues_file_completes_every_job(trace, queues):
    result = run("simulate", "--policy", "hierarchical", "--queues", str(queues), "--workload", str(trace),
                 "--cluster", "v100:4", "--json")

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["policy"] == "hierarchical"
    assert summary["jobs"] == 5 and summary["completed"] == 5


def test_the_shipped_example_runs_on_the_default_cluster():
    result = run("simulate", "--policy", "hierarchical", "--queues", str(EXAMPLE), "--jobs", "40", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["completed"] == 40


def test_compare_runs_hierarchical_beside_a_policy_that_ignores_the_queues(trace, queues):
    result = run("compare", "--policies", "fifo,hierarchical", "--queues", str(queues), "--workload", str(trace),
                 "--cluster", "v100:4", "--workers", "1", "--json")

    assert result.exit_code == 0, result.output
    assert [s["policy"] for s in json.loads(result.stdout)["policies"]] == ["fifo", "hierarchical"]


def test_hierarchical_without_queues_is_one_line():
    result = run("simulate", "--policy", "hierarchical", "--jobs", "5")

    assert result.exit_code == 2
    assert "hierarchical needs --queues FILE" in result.output
    assert "Traceback" not in result.output


def test_queues_for_a_policy_that_does_not_use_them_is_refused(queues):
    result = run("simulate", "--policy", "fifo", "--queues", str(queues), "--jobs", "5")

    assert result.exit_code == 2
    assert "--queues applies to hierarchical only" in result.output


def test_a_bad_queues_file_names_the_line_and_field(tmp_path: Path):
    path = tmp_path / "queues.yaml"
    path.write_text("queues:\n  - name: a\n    weight: -1\n")

    result = run("simulate", "--policy", "hierarchical", "--queues", str(path), "--jobs", "5")

    assert result.exit_code == 2
    assert f"{path}:3: field 'queues[0].weight': must be a number > 0, got -1" in result.output


def test_a_nominal_gpu_type_missing_from_the_cluster_is_one_line(tmp_path: Path):
    path = tmp_path / "queues.yaml"
    path.write_text("queues:\n  - name: a\n    nominal: {a100: 2}\n")

    result = run("simulate", "--policy", "hierarchical", "--queues", str(path), "--cluster", "v100:4", "--jobs", "5")

    assert result.exit_code == 2
    assert f"{path}:3: field 'queues[0].nominal.a100'" in result.output
    assert "cluster: v100" in result.output
