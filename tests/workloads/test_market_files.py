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
