"""`apportion simulate/compare --blocks FILE --privacy-policy …` as a user runs it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    blocks = tmp_path / "blocks.csv"
    blocks.write_text("block,arrival_s,epsilon,delta\nb0,0,1.0,1e-6\n")
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,submit_time_s,duration_s,num_gpus,kind,steps,privacy_blocks,privacy_epsilon\n"
        "big,0,100,1,resnet50/bs64,300,b0,0.5\n"
        "s1,0,100,1,resnet50/bs64,300,b0,0.3\n"
        "s2,0,100,1,resnet50/bs64,300,b0,0.3\n"
        "s3,0,100,1,resnet50/bs64,300,b0,0.3\n"
        "free,0,100,1,resnet50/bs64,300,,\n"
    )
    return blocks, trace


def test_simulate_reports_the_claims_granted_and_writes_them_per_job(files, tmp_path):
    blocks, trace = files
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-w", str(trace), "-c", "v100:8", "--blocks", str(blocks),
                                 "--privacy-policy", "fcfs", "--json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    # fcfs: all arrive at once, in file order: big (0.5) and s1 (0.3) fit, s2 and s3 not
    assert (summary["privacy_granted"], summary["privacy_rejected"]) == (2, 2)
    rows = {row["job_id"]: row for row in csv.DictReader((out / "jobs.csv").open())}
    assert [rows[j]["privacy_claim"] for j in ("big", "s1", "s2", "s3", "free")] == \
        ["granted", "granted", "rejected", "rejected", ""]
    assert "Privacy budget per block" in (out / "report.html").read_text()


def test_compare_runs_every_policy_on_the_same_claims(files):
    blocks, trace = files
    result = runner.invoke(app, ["compare", "-w", str(trace), "-c", "v100:8", "--policies", "fifo,las", "--workers",
                                 "1", "--blocks", str(blocks), "--privacy-policy", "dpf-n", "--privacy-n", "4",
                                 "--json"])
    assert result.exit_code == 0, result.output
    granted = [s["privacy_granted"] for s in json.loads(result.stdout)["policies"]]
    assert granted == [3, 3]  # the three small claims (0.9), never the big one


@pytest.mark.parametrize("flags, words", [
    (["--privacy-policy", "dpf-n"], "--privacy-policy dpf-n needs --privacy-n"),
    (["--privacy-policy", "pack"], "pack needs one of --privacy-n"),
    (["--privacy-policy", "drf"], "--privacy-policy must be one of fcfs, rr, dpf-n, dpf-t, pack, got 'drf'"),
    (["--privacy-policy", "dpf-t", "--privacy-t", "60", "--privacy-timeout-s", "0"], "--privacy-timeout-s must be"),
    (["--privacy-policy", "fcfs", "--privacy-decide", "often"],
     "--privacy-decide must be one of arrival, round, got 'often'"),
    (["--privacy-policy", "rr", "--privacy-n", "3", "--privacy-rejected-portions", "kept"],
     "--privacy-rejected-portions must be one of lost, returned, got 'kept'"),
])
def test_bad_privacy_flags_are_named(files, flags, words):
    blocks, trace = files
    result = runner.invoke(app, ["simulate", "-w", str(trace), "--blocks", str(blocks), *flags])
    assert result.exit_code == 2
    assert words in result.output


def test_privacy_flags_without_blocks_are_refused(files):
    result = runner.invoke(app, ["simulate", "--privacy-n", "3"])
    assert result.exit_code == 2
    assert "--privacy-n applies with --blocks only" in result.output


def test_a_bad_block_file_names_its_line_and_field(files, tmp_path):
    _, trace = files
    blocks = tmp_path / "bad.csv"
    blocks.write_text("block,arrival_s,epsilon,delta\nb0,0,-1,1e-6\n")
    result = runner.invoke(app, ["simulate", "-w", str(trace), "--blocks", str(blocks), "--privacy-n", "2"])
    assert result.exit_code == 2
    assert "bad.csv:2: field 'epsilon'" in result.output

