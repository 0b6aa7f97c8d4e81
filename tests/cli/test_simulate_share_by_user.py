"""`apportion simulate --share-by-user`: a workload's users share the cluster before the policy
orders their jobs, as `apportion serve` does by default (off unless asked for)."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()


def trace(tmp_path: Path) -> Path:
    # 4 V100s: ann submits six 1-GPU jobs at 0 s, bob one at 10 s; each runs about 10 rounds
    path = tmp_path / "trace.csv"
    rows = [f"ann{i},0,3600,1,resnet50/bs64,100000,ann" for i in range(6)] + ["bob0,10,3600,1,resnet50/bs64,100000,bob"]
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,kind,steps,user\n" + "\n".join(rows) + "\n")
    return path


def bob_queued_s(tmp_path: Path, *flags: str) -> float:
    out = tmp_path / ("out" + "".join(flags).replace("-", "_").replace("=", "_").replace(",", "_"))
    result = runner.invoke(app, ["simulate", "--workload", str(trace(tmp_path)), "--cluster", "v100:4",
                                 "--policy", "fifo", "--out", str(out), *flags])
    assert result.exit_code == 0, result.output
    with open(out / "jobs.csv") as rows:
        bob = next(r for r in csv.DictReader(rows) if r["job_id"] == "bob0")
    return float(bob["queueing_s"])


def test_a_second_user_waits_a_round_not_for_the_backlog(tmp_path):
    alone = bob_queued_s(tmp_path)
    shared = bob_queued_s(tmp_path, "--share-by-user")
    assert shared <= 360.0  # the next round (360 s) preempts ann's fourth job for bob's
    assert alone > 10 * 360.0  # fifo alone: bob waits for one of ann's jobs to end


def test_weights_need_sharing_and_a_bad_one_is_named(tmp_path):
    result = runner.invoke(app, ["simulate", "--user-weights", "ann=2"])
    assert result.exit_code == 2 and "--user-weights needs --share-by-user" in result.output
    result = runner.invoke(app, ["simulate", "--share-by-user", "--user-weights", "ann=none"])
    assert result.exit_code == 2
    assert "--user-weights: ann's weight must be a positive number, got 'none'" in result.output
    assert "Traceback" not in result.output
