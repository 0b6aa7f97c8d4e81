"""Markets read from AWS's spot price history and from the CSV format; bad files name line and field."""

import json

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.core.market import SPOT
from apportion.workloads.market_files import read_market
from apportion.workloads.synthetic_market import MarketModel, synthetic_market


def aws_history(*records) -> str:
    return json.dumps({"SpotPriceHistory": [
        {"AvailabilityZone": zone, "InstanceType": name, "ProductDescription": "Linux/UNIX",
         "SpotPrice": price, "Timestamp": when} for zone, name, price, when in records]}, indent=4)


def test_aws_spot_history_gives_spot_series_and_list_priced_on_demand(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "0.918000", "2024-01-01T00:00:00+00:00"),
                                ("us-east-1a", "p3.2xlarge", "1.200000", "2024-01-01T02:00:00.000Z")))
    market = read_market(str(path))
    assert list(market.labels) == ["aws/us-east-1/p3.2xlarge/on-demand", "aws/us-east-1/p3.2xlarge (us-east-1a)/spot"]
    assert list(market.times_s) == [0.0, 7200.0]
    assert market.price_per_hour.tolist() == [[3.06, 3.06], [0.918, 1.2]]
    assert market.gpu_type[1] == "v100" and market.gpus[1] == 1


def test_an_unknown_aws_instance_type_names_its_line(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "0.9", "2024-01-01T00:00:00Z"),
                                ("us-west-2b", "x9.huge", "1.2", "2024-01-01T02:00:00Z")))
    with pytest.raises(InputError) as err:
        read_market(str(path))
    assert err.value.field == "InstanceType" and err.value.line == 12
    assert "x9.huge" in str(err.value)


def test_a_bad_aws_price_names_its_line(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "cheap", "2024-01-01T00:00:00Z")))
    with pytest.raises(InputError, match=r"history.json:7: field 'SpotPrice': not a number: 'cheap'"):
        read_market(str(path))


def test_csv_prices_hold_until_the_next_and_preemptions_are_the_files(tmp_path):
    path = tmp_path / "market.csv"
    path.write_text(
        "time_s,cloud,region,instance_type,market,price_per_hour,event\n"
        "0,aws,us-east-1,p3.2xlarge,on-demand,3.06,\n"
        "0,aws,us-east-1,p3.2xlarge,spot,1.0,\n"
        "3600,aws,us-east-1,p3.2xlarge,spot,0.5,\n"
        "5400,aws,us-east-1,p3.2xlarge,spot,,preemption\n")
    market = read_market(str(path))
    assert market.price_per_hour.tolist() == [[3.06, 3.06], [1.0, 0.5]]
    assert list(market.preempt_type) == [1] and list(market.preempt_s) == [5400.0]


def test_csv_names_line_and_field(tmp_path):
    path = tmp_path / "market.csv"
    path.write_text("time_s,cloud,region,instance_type,market,price_per_hour\n"
                    "0,aws,us-east-1,p3.2xlarge,on-demand,3.06\n"
                    "0,aws,us-east-1,p3.2xlarge,reserved,1.0\n")
    with pytest.raises(InputError, match=r"market.csv:3: field 'market': must be one of on-demand, spot"):
        read_market(str(path))
    path.write_text("time_s,cloud,region,instance_type,market,price_per_hour\n"
                    "0,azure,eastus,NV-mystery,spot,1.0\n")
    with pytest.raises(InputError, match=r"market.csv:2: field 'instance_type': .*give gpu_type and gpus"):
        read_market(str(path))


def test_the_synthetic_market_is_seeded_and_spot_is_cheaper_on_average():
    a, b = synthetic_market(MarketModel(days=3, seed=1)), synthetic_market(MarketModel(days=3, seed=1))
    assert np.array_equal(a.price_per_hour, b.price_per_hour) and np.array_equal(a.preempt_s, b.preempt_s)
    half = len(a) // 2
    assert np.all(a.market[half:] == SPOT) and np.all(a.name[half:] == a.name[:half])
    assert np.all(a.price_per_hour[half:] < a.price_per_hour[:half])
    assert set(a.preempt_type.tolist()) <= set(range(half, len(a)))


def test_a_bad_record_deep_in_a_long_history_names_its_line_and_field(tmp_path):
    path = tmp_path / "history.json"
    records = [("us-east-1a", "p3.2xlarge", "0.9", f"2024-01-01T{h % 24:02d}:00:00Z") for h in range(3000)]
    records[2500] = ("us-east-1a", "p3.2xlarge", "-1", "2024-01-01T00:00:00Z")
    path.write_text(aws_history(*records))
    with pytest.raises(InputError) as err:
        read_market(str(path))
    assert (err.value.line, err.value.field) == (3 + 7 * 2500 + 4, "SpotPrice")  # 7 lines a record
    assert "history.json" in str(err.value) and "'-1'" in str(err.value)
    data = json.loads(aws_history(*records[:3]))
    del data["SpotPriceHistory"][2]["Timestamp"]
    path.write_text(json.dumps(data, indent=4))
    with pytest.raises(InputError, match=r"history.json:17: field 'Timestamp': missing"):
        read_market(str(path))


def test_many_files_and_a_directory_make_one_market(tmp_path):
    """Real histories come one file per region and type; the same series split over two files is one."""
    (tmp_path / "spot").mkdir()
    (tmp_path / "spot" / "p3-week1.json").write_text(aws_history(
        ("us-east-1a", "p3.2xlarge", "0.9", "2024-01-01T00:00:00Z")))
    (tmp_path / "spot" / "p3-week2.json").write_text(aws_history(
        ("us-east-1a", "p3.2xlarge", "1.1", "2024-01-08T00:00:00Z")))
    (tmp_path / "g4dn.json").write_text(aws_history(("us-west-2b", "g4dn.xlarge", "0.2", "2024-01-01T00:00:00Z")))
    market = read_market([str(tmp_path / "spot"), str(tmp_path / "g4dn.json")])
    assert set(market.labels) == {"aws/us-east-1/p3.2xlarge/on-demand", "aws/us-west-2/g4dn.xlarge/on-demand",
                                  "aws/us-east-1/p3.2xlarge (us-east-1a)/spot", "aws/us-west-2/g4dn.xlarge (us-west-2b)/spot"}
    p3 = list(market.labels).index("aws/us-east-1/p3.2xlarge (us-east-1a)/spot")
    assert list(market.times_s) == [0.0, 7 * 86400.0] and market.price_per_hour[p3].tolist() == [0.9, 1.1]
    assert market.source.startswith("3 files")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: a directory with no market file in it"):
        read_market([str(tmp_path / "empty")])


def test_the_market_starts_where_every_series_has_a_price(tmp_path):
    """AWS lists the price in force at the query's start with the time it was set (here 68 days
    earlier): the market starts at the latest first price, says so, and --market-start moves it."""
    stale = tmp_path / "p3.json"
    stale.write_text(aws_history(("us-east-1a", "p3.2xlarge", "0.95", "2023-10-25T00:00:00Z"),
                                 ("us-east-1a", "p3.2xlarge", "1.0", "2024-01-03T00:00:00Z")))
    fresh = tmp_path / "g4dn.json"
    fresh.write_text(aws_history(("us-east-1b", "g4dn.xlarge", "0.2", "2024-01-01T00:00:00Z"),
                                 ("us-east-1b", "g4dn.xlarge", "0.25", "2024-01-04T00:00:00Z")))
    market = read_market([str(stale), str(fresh)])
    assert market.times_s.tolist() == [0.0, 2 * 86400.0, 3 * 86400.0]  # from 2024-01-01, not 2023-10-25
    spot = {label: k for k, label in enumerate(market.labels)}
    assert market.price_per_hour[spot["aws/us-east-1/p3.2xlarge (us-east-1a)/spot"]].tolist() == [0.95, 1.0, 1.0]
    assert any("starts at 2024-01-01T00:00:00Z" in note and "68.0 days" in note for note in market.notes)
    earlier = read_market([str(stale), str(fresh)], start="2023-12-31T00:00:00Z")
    g4dn = list(earlier.labels).index("aws/us-east-1/g4dn.xlarge (us-east-1b)/spot")
    assert np.isnan(earlier.price_per_hour[g4dn, 0]) and earlier.price_per_hour[g4dn, 1] == 0.2
    assert any("1 series have no price at the start" in note and "g4dn.xlarge" in note for note in earlier.notes)
    with pytest.raises(InputError, match="--market-start: not an ISO 8601 time or seconds: 'soon'"):
        read_market(str(stale), start="soon")


def test_a_step_with_a_price_change_holds_its_time_weighted_mean(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "1.0", "2024-01-01T00:00:00Z"),
                                ("us-east-1a", "p3.2xlarge", "2.0", "2024-01-01T00:15:00Z"),
                                ("us-east-1a", "p3.2xlarge", "1.0", "2024-01-01T02:00:00Z")))
    market = read_market(str(path))
    assert market.times_s.tolist() == [0.0, 7200.0]
    assert market.price_per_hour[1].tolist() == [pytest.approx(1.875), 1.0]  # 1.0 for 15 min, 2.0 for 105
    assert market.cost(np.array([1]), np.array([0.0]), np.array([7200.0]))[0] == pytest.approx(3.75)


def test_every_aws_region_is_priced_on_demand_or_refused(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(aws_history(("eu-central-1a", "p3.2xlarge", "1.2", "2024-01-01T00:00:00Z")))
    market = read_market(str(path))
    assert market.price_per_hour[0, 0] == pytest.approx(3.06 * 1.25)  # eu-central-1's, not us-east-1's $3.06
    assert market.price_per_hour[1, 0] < market.price_per_hour[0, 0]
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "0.9", "2024-01-01T00:00:00Z"),
                                ("mars-north-1a", "p3.2xlarge", "1.2", "2024-01-01T00:00:00Z")))
    with pytest.raises(InputError) as err:
        read_market(str(path))
    assert (err.value.line, err.value.field) == (11, "AvailabilityZone") and "'mars-north-1'" in str(err.value)


def test_the_catalogue_prices_every_aws_region_of_the_synthetic_market():
    from apportion.workloads.instance_catalog import AWS_REGION_FACTORS, REGIONS

    assert all(AWS_REGION_FACTORS[region] == factor for region, factor in REGIONS["aws"].items())


def test_interruption_rates_replace_the_modelled_preemptions(tmp_path):
    """AWS publishes a bucket of interruptions a month per type and region; a spot type is then taken
    back at that rate, whatever its price, and the market says where its preemptions come from."""
    from apportion.workloads.interruption_rates import read_interruption_rates

    history = tmp_path / "history.json"
    history.write_text(aws_history(("us-east-1a", "p3.2xlarge", "0.9", "2024-01-01T00:00:00Z"),
                                   ("us-east-1a", "p3.2xlarge", "0.9", "2024-03-01T00:00:00Z"),
                                   ("us-west-2a", "g4dn.xlarge", "0.2", "2024-01-01T00:00:00Z")))
    rates = tmp_path / "rates.csv"
    rates.write_text("instance_type,region,interruption\np3.2xlarge,,>20%\ng4dn.xlarge,us-west-2,<5%\n")
    table = read_interruption_rates(str(rates))
    assert table.per_hour("p3.2xlarge", "eu-west-1") == pytest.approx(-np.log(0.75) / 730)
    market = read_market(str(history), interruption_rates=table)
    counts = np.bincount(market.preempt_type, minlength=len(market))
    p3, g4dn = (list(market.labels).index(label) for label in
                ("aws/us-east-1/p3.2xlarge (us-east-1a)/spot", "aws/us-west-2/g4dn.xlarge (us-west-2a)/spot"))
    assert 0 < counts[p3] < 3 and counts[g4dn] == 0  # 60 days at 25% a month; at 2.5%, almost never
    assert "rates.csv's interruption rates" in market.preemptions_from
    assert "synthetic market's rule" in read_market(str(history)).preemptions_from
    rates.write_text("instance_type,region,interruption\np3.2xlarge,,>20%\n")
    with pytest.raises(InputError, match="no interruption rate for g4dn.xlarge in us-west-2"):
        read_market(str(history), interruption_rates=read_interruption_rates(str(rates)))
    rates.write_text("instance_type,interruption\np3.2xlarge,often\n")
    with pytest.raises(InputError, match=r"rates.csv:2: field 'interruption': must be one of <5%, 5-10%"):
        read_interruption_rates(str(rates))


def test_the_spot_advisors_own_json_gives_the_rates(tmp_path):
    from apportion.workloads.interruption_rates import read_interruption_rates

    path = tmp_path / "spot-advisor-data.json"
    path.write_text(json.dumps({
        "ranges": [{"index": 0, "label": "<5%", "dots": 0, "max": 5}, {"index": 3, "label": "15-20%", "dots": 3, "max": 22}],
        "spot_advisor": {"us-east-1": {"Linux": {"p3.2xlarge": {"s": 70, "r": 3}}, "Windows": {}}}}))
    rates = read_interruption_rates(str(path))
    assert rates.per_hour("p3.2xlarge", "us-east-1") == pytest.approx(-np.log(1 - 0.175) / 730)
    assert rates.per_hour("p3.2xlarge", "us-west-2") is None


def test_a_spot_price_over_on_demand_is_said(tmp_path):
    """AWS caps spot at on-demand: a spot price above the on-demand price used means that price is off."""
    path = tmp_path / "history.json"
    path.write_text(aws_history(("us-east-1a", "p3.2xlarge", "4.0", "2024-01-01T00:00:00Z"),
                                ("eu-central-1a", "p2.xlarge", "1.326", "2024-01-01T00:00:00Z")))
    market = read_market(str(path))
    [note] = market.notes
    assert "1 spot types cost more than their on-demand type" in note and "p3.2xlarge (us-east-1a)/spot 1.31x" in note
