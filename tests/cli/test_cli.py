"""The `apportion` command as a user runs it: defaults, outputs, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_simulate_with_no_arguments_runs_the_embedded_default():
    result = run("simulate", "--json")

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["jobs"] == 400
    assert summary["completed"] == 400
    assert summary["unschedulable"] == 0
    assert summary["cluster"] == "v100:8,p100:8,k80:8"
    for key in ("policy", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queueing_s",
                "utilization", "preemptions", "sim_wall_s"):
        assert key in summary


def test_simulate_writes_the_five_outputs(tmp_path: Path):
    result = run("simulate", "--policy", "las", "--jobs", "60", "--out", str(tmp_path))

    assert result.exit_code == 0, result.output
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json", "jobs.csv", "timeline.csv", "report.png",
                                                    "report.html"}
    assert '"gantt":[{"policy":"las","figure":{"bars"' in _report_data(tmp_path / "report.html")  # holdings recorded
    assert json.loads((tmp_path / "summary.json").read_text())["policy"] == "las"
    assert len((tmp_path / "jobs.csv").read_text().splitlines()) == 61


def test_same_seed_same_summary_different_seed_different():
    first = json.loads(run("simulate", "--jobs", "80", "--json").stdout)
    again = json.loads(run("simulate", "--jobs", "80", "--json").stdout)
    other = json.loads(run("simulate", "--jobs", "80", "--seed", "1", "--json").stdout)

    for summary in (first, again, other):
        summary.pop("sim_wall_s")
    assert first == again
    assert first != other


def test_compare_runs_each_policy_on_the_same_workload(tmp_path: Path):
    result = run("compare", "--policies", "fifo,max-min-fairness:agnostic", "--jobs", "60",
                 "--workers", "1", "--out", str(tmp_path), "--json")

    assert result.exit_code == 0, result.output
    policies = [s["policy"] for s in json.loads(result.stdout)["policies"]]
    assert policies == ["fifo", "max-min-fairness:agnostic"]
    assert (tmp_path / "comparison.json").exists() and (tmp_path / "comparison.png").exists()
    assert _report_data(tmp_path / "report.html").count('"figure":{"bars"') == 2  # holdings recorded for each policy


def test_compare_with_and_without_space_sharing_on_the_catalog():
    result = run("compare", "--policies", "max-min-fairness,max-min-fairness:space-sharing", "--jobs", "80",
                 "--rate", "40", "--cluster", "v100:4,p100:4,k80:4", "--workers", "1", "--json")

    assert result.exit_code == 0, result.output
    summaries = json.loads(result.stdout)["policies"]
    assert [s["policy"] for s in summaries] == ["max-min-fairness", "max-min-fairness:space-sharing"]
    assert "shared_gpu_hours" not in summaries[0] and summaries[1]["shared_gpu_hours"] > 0


def test_compare_in_parallel_processes_matches_one_process():
    serial = json.loads(run("compare", "--policies", "fifo,las", "--jobs", "40", "--workers", "1", "--json").stdout)
    parallel = json.loads(run("compare", "--policies", "fifo,las", "--jobs", "40", "--workers", "2", "--json").stdout)

    for group in (serial, parallel):
        for summary in group["policies"]:
            summary.pop("sim_wall_s")
    assert serial == parallel


def test_a_trace_csv_replays_job_for_job(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,submit_time_s,duration_s,num_gpus,kind,steps\n"
        "a,0,100,1,resnet50/bs64,1000\n"
        "b,0,100,2,transformer/bs64,500\n"
    )
    result = run("simulate", "--workload", str(trace), "--cluster", "v100:4", "--policy", "fifo", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["completed"] == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--cluster", "v100:x"), "--cluster: field 'v100 GPUs': must be a positive integer, got 'x'"),
        (("--cluster", "v100:4,tpu:4"), "GPU type 'tpu' has no throughputs"),
        (("--policy", "nope"), "unknown policy 'nope' (known: fifo, srtf, las, qssf, max-min-fairness, finish-time-fairness, min-makespan, max-throughput, min-cost, hierarchical, goodput, optimus)"),
        (("--jobs", "0"), "--jobs must be positive"),
        (("--workload", "/no/such/trace.csv"), "/no/such/trace.csv"),
        (("--policy", "max-min-fairness:shared"), "unknown policy variant ':shared'"),
        (("--policy", "las", "--space-sharing"), "--space-sharing applies to finish-time-fairness, max-min-fairness, max-throughput, min-cost, min-makespan, not to 'las'"),
        (("--policy", "srtf", "--durations", "guess"), "--durations must be one of predicted, oracle, got 'guess'"),
        (("--policy", "las", "--durations", "predicted"), "--durations applies to finish-time-fairness, qssf, srtf only"),
        (("--received-since", "start"), "--received-since must be one of arrival, allocation, got 'start'"),
    ],
)
def test_bad_input_is_one_line_naming_what_is_wrong(args, expected):
    result = run("simulate", *args)

    assert result.exit_code == 2
    assert expected in result.output
    assert "Traceback" not in result.output


def test_a_bad_csv_row_names_the_file_line_and_field(tmp_path: Path):
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus\nj1,0,100,1\nj2,10,abc,2\n")

    result = run("simulate", "--workload", str(trace))

    assert result.exit_code == 2
    assert f"{trace}:3: field 'duration_s'" in result.output


def test_a_bad_cluster_yaml_names_the_line_and_field(tmp_path: Path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("node_groups:\n  - gpu_type: v100\n    nodes: -2\n")

    result = run("simulate", "--cluster", str(cluster))

    assert result.exit_code == 2
    assert f"{cluster}:3: field 'node_groups[0].nodes'" in result.output


def test_kinds_lists_the_catalog():
    result = run("kinds")

    assert result.exit_code == 0
    assert "resnet50/bs64" in result.output and "h100" in result.output


def test_a_gavel_throughput_file_adds_kinds_and_gpu_types(tmp_path: Path):
    gavel = tmp_path / "throughputs.json"
    gavel.write_text(json.dumps({
        "mi250": {"('MyNet (batch size 32)', 1)": {"null": 2.0}},
        "v100": {"('MyNet (batch size 32)', 1)": {"null": 1.0}},
    }))
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,kind,steps\nx,0,1,1,mynet/bs32,7200\n")

    result = run("simulate", "--workload", str(trace), "--throughputs", str(gavel),
                 "--cluster", "mi250:1", "--policy", "fifo", "--restart-cost-s", "0", "--json")

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # 7200 steps at 2 steps/s on the one mi250: 3600 s
    assert summary["avg_jct_s"] == pytest.approx(3600.0)


def test_simulate_names_the_jobs_that_can_never_run_under_its_summary(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\nok,0,1,600\nhuge,10,64,600\n")

    result = run("simulate", "--workload", str(trace), "--cluster", "v100:8,k80:4", "--policy", "fifo")

    assert result.exit_code == 0, result.output
    assert "1 unschedulable job under fifo:" in result.stdout
    assert "huge: needs 64 GPUs; the largest type that runs" in result.stdout


def _report_data(path: Path) -> str:
    """The JSON report.html carries (gzip + base64 in the page)."""
    import base64
    import gzip
    import re

    packed = re.search(r'id="report-data">([^<]*)<', path.read_text()).group(1)
    return gzip.decompress(base64.b64decode(packed)).decode()


def test_simulate_learns_elastic_jobs_models_with_learn_models_and_refuses_it_without_elastic_jobs():
    learning = run("simulate", "--shape", "pollux", "--jobs", "6", "--cluster", "t4:8", "--policy", "goodput",
                   "--learn-models", "--json")

    assert learning.exit_code == 0, learning.output
    summary = json.loads(learning.stdout)
    assert summary["completed"] == 6 and summary["model_fits"] >= 6  # every job fitted at least once

    fixed = run("simulate", "--jobs", "5", "--learn-models")
    assert fixed.exit_code == 2
    assert "elastic jobs only" in fixed.output
