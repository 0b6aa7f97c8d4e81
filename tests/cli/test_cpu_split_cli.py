"""`apportion simulate --cpu-split`: a trace whose jobs' speeds depend on their CPU cores."""

from __future__ import annotations

import csv
import json

from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()
TRACE = ("job_id,submit_time_s,duration_s,num_gpus,kind,cpu_speed\n"
         "decoder,0,3600,1,resnet50/bs64,1:0.25 2:0.5 4:1\n"
         "language,0,3600,1,resnet50/bs64,\n")
CLUSTER = "node_groups:\n  - {gpu_type: v100, nodes: 1, gpus_per_node: 2, cpus_per_node: 6}\n"


def files(tmp_path):
    (tmp_path / "trace.csv").write_text(TRACE)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    return ["--workload", str(tmp_path / "trace.csv"), "--cluster", str(tmp_path / "cluster.yaml")]


def test_the_aware_split_removes_the_stall_an_even_split_leaves(tmp_path):
    out = tmp_path / "even"
    even = runner.invoke(app, ["simulate", *files(tmp_path), "--policy", "fifo", "--json", "--out", str(out)])
    aware = runner.invoke(app, ["simulate", *files(tmp_path), "--policy", "fifo", "--cpu-split", "aware", "--json"])
    assert even.exit_code == 0, even.output
    assert aware.exit_code == 0, aware.output
    even_summary = json.JSONDecoder().raw_decode(even.stdout)[0]  # then the files written
    aware_summary = json.loads(aware.stdout)
    # 3 cores a GPU: the decoder trains at 0.75 of its best speed and its GPU waits a quarter of the time
    stalls = {row["job_id"]: row["data_stall"] for row in csv.DictReader((out / "jobs.csv").open())}
    assert stalls == {"decoder": "0.25", "language": "0.0"}
    assert even_summary["cpu_split"] == "proportional"  # the default
    assert aware_summary["data_stall"] == 0.0
    assert aware_summary["avg_jct_s"] < even_summary["avg_jct_s"]


def test_an_unknown_split_is_a_one_line_error(tmp_path):
    result = runner.invoke(app, ["simulate", *files(tmp_path), "--cpu-split", "even"])
    assert result.exit_code != 0
    assert "--cpu-split must be one of proportional, aware, greedy, got 'even'" in result.output


def test_a_rented_replay_refuses_what_it_cannot_model_rather_than_ignore_it(tmp_path):
    market = tmp_path / "market.csv"
    market.write_text("time_s,cloud,region,instance_type,market,price_per_hour,event\n"
                      "0,aws,us-east-1,p3.2xlarge,on-demand,3.0,\n")
    for extra in (["--cpu-split", "aware"], []):  # the split asked for, or the trace's cpu_speed column alone
        result = runner.invoke(app, ["simulate", *files(tmp_path), "--market", str(market), *extra])
        assert result.exit_code != 0
        assert "a rented cluster does not model CPU cores" in result.output and "Traceback" not in result.output
