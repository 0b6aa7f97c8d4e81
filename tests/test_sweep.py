"""Sweeps: a grid of replays, each metric's mean over the seeds with a 95% confidence interval."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.experiment import WorkloadSettings
from apportion.sweep import grid, mean_ci, run_grid, summarize

SMALL = WorkloadSettings(jobs=20, cluster="v100:4,k80:4")


def test_the_interval_is_students_t_over_the_seeds():
    mean, half = mean_ci([1.0, 2.0, 3.0])

    # t(0.975, 2 degrees of freedom) = 4.3027; the standard error is 1 / sqrt(3)
    assert mean == 2.0 and half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean_ci([5.0]) == (5.0, None)  # one seed: no interval


def test_a_summary_groups_the_seeds_of_each_point_and_skips_what_a_replay_could_not_give():
    rows = [{"policy": "fifo", "cluster": "c", "rate_per_hour": 4.0, "seed": s, "avg_jct_s": v}
            for s, v in enumerate([10.0, 20.0, None])]
    rows.append({"policy": "las", "cluster": "c", "rate_per_hour": 4.0, "seed": 0, "avg_jct_s": 7.0})

    fifo, las = summarize(rows, ["avg_jct_s"])

    assert fifo["seeds"] == 3 and fifo["avg_jct_s"]["n"] == 2 and fifo["avg_jct_s"]["mean"] == 15.0
    assert fifo["avg_jct_s"]["low"] < 15.0 < fifo["avg_jct_s"]["high"]
    assert las["avg_jct_s"] == {"mean": 7.0, "ci95": None, "low": None, "high": None, "n": 1}


def test_the_grid_gives_the_same_replays_here_and_in_worker_processes():
    cells = grid(["fifo", "las"], rates=[4.0], seeds=[0, 1], clusters=["v100:4,k80:4"])
    here = run_grid(cells, SMALL, workers=1)
    apart = run_grid(cells, SMALL, workers=2)

    assert [(r["policy"], r["seed"]) for r in here] == [("fifo", 0), ("fifo", 1), ("las", 0), ("las", 1)]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in rows]  # noqa: E731
    assert strip(here) == strip(apart)
    assert here[0]["avg_jct_s"] != here[1]["avg_jct_s"]  # two seeds, two workloads


def test_apportion_sweep_prints_the_grid_as_json_and_writes_a_plot(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--policies", "fifo", "--rates", "4,8", "--seeds", "0-1", "--jobs",
                                      "20", "--cluster", "v100:4", "--workers", "1", "--json", "--out",
                                      str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)

    assert document["grid"]["seeds"] == [0, 1] and document["grid"]["rates_per_hour"] == [4.0, 8.0]
    assert [(s["rate_per_hour"], s["seeds"]) for s in document["summary"]] == [(4.0, 2), (8.0, 2)]
    assert len(document["cells"]) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep-cells.csv", "sweep.json", "sweep.png"]


@pytest.mark.parametrize("args, message", [
    (["--seeds", "5-1"], "--seeds: '5-1' is an empty range"),
    (["--rates", "4,fast"], "--rates must be comma-separated numbers"),
    (["--workload", "trace.csv", "--rates", "4"], "--rates applies to the synthetic workload only"),
    (["--policies", "fifo,nope"], "nope"),
])
def test_a_bad_grid_is_refused_before_any_replay(args, message):
    result = CliRunner().invoke(app, ["sweep", "--jobs", "20", *args])

    assert result.exit_code == 2 and message in result.output


def test_a_sweep_divides_cores_and_grants_privacy_budget_as_simulate_does(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,kind,steps,cpu_speed,privacy_blocks,privacy_epsilon\n"
                     "decoder,0,3600,1,resnet50/bs64,1000,1:0.25 2:0.5 4:1,b0,0.6\n"
                     "language,0,3600,1,resnet50/bs64,1000,,b0,0.6\n")
    (tmp_path / "cluster.yaml").write_text(
        "node_groups:\n  - {gpu_type: v100, nodes: 1, gpus_per_node: 2, cpus_per_node: 6}\n")
    (tmp_path / "blocks.csv").write_text("block,arrival_s,epsilon,delta\nb0,0,1.0,1e-6\n")
    common = ["sweep", "--policies", "fifo", "--seeds", "0", "--workload", str(trace), "--cluster",
              str(tmp_path / "cluster.yaml"), "--workers", "1", "--blocks", str(tmp_path / "blocks.csv"),
              "--privacy-policy", "fcfs", "--json"]
    even = CliRunner().invoke(app, common)
    aware = CliRunner().invoke(app, [*common, "--cpu-split", "aware"])
    assert even.exit_code == 0, even.output
    assert aware.exit_code == 0, aware.output
    even_cell, aware_cell = json.loads(even.stdout)["cells"][0], json.loads(aware.stdout)["cells"][0]
    # one claim of 0.6 of the block's 1.0 fits, the second does not
    assert even_cell["privacy_granted"] == aware_cell["privacy_granted"] == 1
    # the granted job alone on the node: 3 cores a GPU under an even split (0.75 of its speed), all 6 when aware
    assert even_cell["data_stall"] == 0.25 and aware_cell["data_stall"] == 0.0
    assert json.loads(aware.stdout)["grid"]["cpu_split"] == "aware"
    assert "data stall" in CliRunner().invoke(app, common[:-1]).output
