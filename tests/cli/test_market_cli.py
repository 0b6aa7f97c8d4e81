"""`apportion simulate/compare --market FILE|synthetic --provisioning …` as a user runs it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()

MARKET = ("time_s,cloud,region,instance_type,market,price_per_hour,event\n"
          "0,aws,us-east-1,p3.2xlarge,on-demand,3.0,\n"
          "0,aws,us-east-1,p3.2xlarge,spot,1.0,\n")
# one V100 job of 2 hours (on the reference type), due within 3 hours, that may spend $10
TRACE = "job_id,submit_time_s,duration_s,num_gpus,deadline_s,budget_usd\nj1,0,7200,1,10800,10\n"


def files(tmp_path):
    (tmp_path / "market.csv").write_text(MARKET)
    (tmp_path / "trace.csv").write_text(TRACE)
    return str(tmp_path / "market.csv"), str(tmp_path / "trace.csv")


def test_simulate_on_a_market_file_prices_the_run(tmp_path):
    market, trace = files(tmp_path)
    result = runner.invoke(app, ["simulate", "-w", trace, "--market", market, "--provisioning", "static",
                                 "--round-s", "3600", "--restart-cost-s", "0", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["provisioning"] == "static" and summary["completed"] == 1
    assert summary["dollars"] == 6.0 and summary["dollars_on_demand"] == 6.0  # 2 h at $3
    assert summary["deadlines_met"] == 1


def test_compare_on_the_synthetic_market_costs_less_dynamically():
    result = runner.invoke(app, ["compare", "--market", "synthetic", "-n", "20", "--json"])
    assert result.exit_code == 0, result.output
    summaries = {s["policy"]: s for s in json.loads(result.stdout)["policies"]}
    assert list(summaries) == ["static", "cheapest-now", "cheapest-now:daily", "spot-fallback", "deadline-aware"]
    assert all(s["completed"] == 20 for s in summaries.values())
    assert summaries["cheapest-now"]["dollars"] < summaries["static"]["dollars"]


def test_a_bad_market_file_is_named_with_its_line_and_field(tmp_path):
    market, trace = files(tmp_path)
    (tmp_path / "market.csv").write_text(MARKET + "0,aws,us-east-1,p3.2xlarge,spot,lots,\n")
    result = runner.invoke(app, ["simulate", "-w", trace, "--market", market])
    assert result.exit_code == 2
    assert "market.csv:4: field 'price_per_hour': not a number: 'lots'" in result.output


def test_an_unknown_provisioning_policy_is_named(tmp_path):
    market, trace = files(tmp_path)
    result = runner.invoke(app, ["simulate", "-w", trace, "--market", market, "--provisioning", "cheap"])
    assert result.exit_code == 2
    assert "unknown policy 'cheap'" in result.output and "deadline-aware" in result.output


def test_the_command_line_offers_every_provisioning_policy():
    from apportion.cli.options import PROVISIONING_NAMES
    from apportion.policies.provisioning import PROVISIONING

    assert PROVISIONING_NAMES == tuple(PROVISIONING)
