"""`apportion trace info FILE`: what a trace holds, for people and (--json) for scripts."""

import json

from typer.testing import CliRunner

from apportion.cli import app
from tests.workloads.test_public_traces import HELIOS, PODS

runner = CliRunner()

TRACE = """job_id,submit_time_s,duration_s,num_gpus,gpu_type
a,0,600,1,v100
b,1800,7200,4,v100
c,3600,30,8,k80
d,7200,36000,2,
"""


def info(tmp_path, text, *args, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return runner.invoke(app, ["trace", "info", str(path), *args])


def test_json_gives_jobs_span_histograms_gpu_types_and_the_load_on_a_cluster(tmp_path):
    result = info(tmp_path, TRACE, "--cluster", "v100:4,k80:4", "--json")
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)
    assert (s["format"], s["jobs"], s["span_s"], s["last_end_s"]) == ("apportion", 4, 7200, 43200)
    assert s["arrivals"]["bin_s"] == 3600 and s["arrivals"]["per_bin"] == [2, 1, 1]
    assert [(r["gpus"], r["jobs"]) for r in s["gpus"]["histogram"]] == [("1", 1), ("2", 1), ("3-4", 1), ("5-8", 1)]
    assert [r["jobs"] for r in s["duration_s"]["histogram"]] == [1, 0, 1, 1, 1, 0]  # 30 s, 600 s, 2 h, 10 h
    assert [(r["gpu_type"], r["jobs"]) for r in s["gpu_types"]] == [("v100", 2), ("", 1), ("k80", 1)]
    asked = (600 * 1 + 7200 * 4 + 30 * 8 + 36000 * 2) / 3600
    assert s["cluster"]["gpu_hours_asked"] == asked
    assert s["cluster"]["gpu_hours_available"] == 8 * 2  # 8 GPUs over the 2 h of submissions
    assert s["cluster"]["load"] == asked / 16
    assert s["cluster"]["jobs_larger_than_cluster"] == 0


def test_a_public_trace_says_its_format_and_what_was_left_out(tmp_path):
    result = info(tmp_path, HELIOS, name="cluster_log.csv")
    assert result.exit_code == 0, result.output
    assert "3 jobs submitted over" in result.stdout and "(helios)" in result.stdout
    assert "left out: 1 CPU-only jobs (gpu_num 0)" in result.stdout
    pods = json.loads(info(tmp_path, PODS, "--json", name="openb_pod_list_default.csv").stdout)
    assert pods["notes"] == ["1 pods asked for a share of one GPU (gpu_milli under 1000); each is read as a job "
                             "holding one whole GPU"]
    assert [(r["gpu_type"], r["jobs"]) for r in pods["gpu_types"]] == [("", 1), ("V100M32", 1)]


def test_people_get_tables_and_a_warning_for_jobs_the_cluster_cannot_hold(tmp_path):
    result = info(tmp_path, TRACE, "--cluster", "v100:4")
    assert result.exit_code == 0, result.output
    assert "GPUs per job" in result.stdout and "Durations" in result.stdout and "GPU types asked for" in result.stdout
    assert "on 4 GPUs over 2 h:" in result.stdout
    assert "1 jobs ask for more GPUs than the cluster has" in result.stdout


def test_bad_input_is_one_line_naming_file_line_and_field(tmp_path):
    result = info(tmp_path, TRACE.replace("b,1800,7200", "b,1800,-5"))
    assert result.exit_code == 2
    assert "trace.csv:3: field 'duration_s': must be > 0 and at most 315,576,000 s (10 years), got '-5'" in result.output
    result = info(tmp_path, TRACE.replace("d,7200,", "d,1e300,"), "--json")  # no bin per week of 1e300 s
    assert result.exit_code == 2 and "trace.csv:5: field 'submit_time_s': must be from 0 to 3,155,760,000 s (100 years)" in result.output
    assert "Traceback" not in result.output
    result = info(tmp_path, TRACE, "--trace-format", "slurm")
    assert result.exit_code == 2 and "unknown trace format 'slurm'" in result.output
    result = info(tmp_path, TRACE, "--cluster", "v100:lots")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_simulate_reads_a_public_trace_as_it_ships_or_as_the_format_named(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    result = runner.invoke(app, ["simulate", "--workload", str(path), "--policy", "fifo", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["completed"] == 3  # the GPU jobs that ran
    result = runner.invoke(app, ["simulate", "--workload", str(path), "--trace-format", "alibaba-2023"])
    assert result.exit_code == 2
    assert "cluster_log.csv:1: field 'name': missing required column of an openb_pod_list file" in result.output
    result = runner.invoke(app, ["simulate", "--trace-format", "helios"])
    assert result.exit_code == 2 and "--trace-format applies with --workload FILE only" in result.output
