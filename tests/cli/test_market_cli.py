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


SPOT = ('{"SpotPriceHistory": [{"AvailabilityZone": "%s", "InstanceType": "p3.2xlarge", '
        '"ProductDescription": "Linux/UNIX", "SpotPrice": "%s", "Timestamp": "%s"}]}')


def test_market_files_are_all_read_when_market_is_repeated_or_a_directory(tmp_path):
    """Real histories come one file per region and type: every one given is read, none silently dropped."""
    _, trace = files(tmp_path)
    (tmp_path / "spot").mkdir()
    (tmp_path / "spot" / "east.json").write_text(SPOT % ("us-east-1a", "1.2", "2024-01-01T00:00:00Z"))
    (tmp_path / "west.json").write_text(SPOT % ("us-west-2a", "0.9", "2024-01-01T00:00:00Z"))
    result = runner.invoke(app, ["simulate", "-w", trace, "--market", str(tmp_path / "spot"), "--market",
                                 str(tmp_path / "west.json"), "--provisioning", "cheapest-now", "--round-s", "3600",
                                 "--restart-cost-s", "0", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["market"].startswith("2 files") and summary["completed"] == 1
    assert list(summary["dollars_by_type"]) == ["aws/us-west-2/p3.2xlarge (us-west-2a)/spot"]  # the cheaper file's
    assert summary["dollars"] == 1.8


def test_a_stale_first_price_is_said_and_market_start_moves_the_start(tmp_path):
    _, trace = files(tmp_path)
    (tmp_path / "old.json").write_text(SPOT % ("us-east-1a", "1.2", "2023-10-25T00:00:00Z"))
    (tmp_path / "new.json").write_text(SPOT % ("us-west-2a", "0.9", "2024-01-01T00:00:00Z"))
    given = ["simulate", "-w", trace, "--market", str(tmp_path / "old.json"), "--market", str(tmp_path / "new.json")]
    result = runner.invoke(app, given + ["--json"])
    assert result.exit_code == 0, result.output
    assert "note:" in result.stderr and "starts at 2024-01-01T00:00:00Z" in result.stderr and "68.0 days" in result.stderr
    result = runner.invoke(app, given + ["--market-start", "2023-12-01T00:00:00Z", "--json"])
    assert result.exit_code == 0, result.output
    assert "1 series have no price at the start 2023-12-01T00:00:00Z" in result.stderr
    result = runner.invoke(app, given + ["--market-start", "yesterday"])
    assert result.exit_code == 2 and "--market-start: not an ISO 8601 time or seconds: 'yesterday'" in result.output
    result = runner.invoke(app, ["simulate", "-w", trace, "--market-start", "2024-01-01"])
    assert result.exit_code == 2 and "--market-start applies with --market FILE only" in result.output


def test_the_results_say_where_spot_preemptions_come_from(tmp_path):
    _, trace = files(tmp_path)
    (tmp_path / "spot.json").write_text(SPOT % ("us-east-1a", "0.9", "2024-01-01T00:00:00Z"))
    (tmp_path / "rates.csv").write_text("instance_type,interruption\np3.2xlarge,5-10%\n")
    given = ["compare", "-w", trace, "--market", str(tmp_path / "spot.json"), "--provisioning", "static,cheapest-now"]
    result = runner.invoke(app, given)
    assert result.exit_code == 0, result.output
    assert "spot preemptions: drawn by the synthetic market's rule" in " ".join(result.stdout.split())
    result = runner.invoke(app, given + ["--interruption-rates", str(tmp_path / "rates.csv"), "--json"])
    assert result.exit_code == 0, result.output
    summaries = json.loads(result.stdout)["policies"]
    assert all("rates.csv's interruption rates" in s["spot_preemptions_from"] for s in summaries)
    result = runner.invoke(app, ["compare", "--market", "synthetic", "--interruption-rates", str(tmp_path / "rates.csv")])
    assert result.exit_code == 2 and "--interruption-rates: applies to a market read from files" in result.output
