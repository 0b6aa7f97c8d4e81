"""A server config file read into settings: types checked, paths made absolute, and each error
naming the file, the line and the key (apportion serve's use of it: tests/cli/test_serve_config.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from apportion.core.errors import InputError
from apportion.serve.app.settings import DEFAULTS, ServeSettings, SettingError, check_settings
from apportion.serve.app.settings_file import load_settings_file, settings_yaml


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.yaml"
    path.write_text(text)
    return path


def test_values_are_typed_and_paths_are_relative_to_the_file(tmp_path):
    read = load_settings_file(config(tmp_path, "port: 9000\nround_s: 60\nuser_map: users.yaml\n"
                                               "cluster: ~/ray.yaml\nslots: null\ncheckpoint_every: 600\n"))

    assert read.values == {"port": 9000, "round_s": 60.0, "user_map": tmp_path / "users.yaml",
                           "cluster": Path.home() / "ray.yaml", "checkpoint_every": "600"}
    assert read.lines["cluster"] == 4 and read.policy_options == {}


def test_policy_options_are_kept_by_name_unless_left_at_their_default(tmp_path):
    read = load_settings_file(config(tmp_path, "goodput_p: 0.5\ngoodput_exact: false\npartitions: 1\n"
                                               "las_thresholds: [60, 600]\ndurations: oracle\n"))

    assert read.policy_options == {"p": 0.5, "thresholds_gpu_s": "60,600", "durations": "oracle"}
    assert read.key_of("p") == "goodput_p"


def test_an_empty_file_says_nothing(tmp_path):
    read = load_settings_file(config(tmp_path, "# nothing yet\n"))

    assert read.values == {} and read.policy_options == {}


@pytest.mark.parametrize("text, line, key, message", [
    ("round_s: 60\nbogus: 1\n", 2, "bogus", "unknown setting (known: state_dir, host, port,"),
    ("state-dir: x\n", 1, "state-dir", "unknown setting; did you mean 'state_dir'?"),
    ("water_filing: true\n", 1, "water_filing", "unknown setting; did you mean 'water_filling'?"),
    ("round_s: fast\n", 1, "round_s", "must be a number of seconds, got 'fast'"),
    ("host: 127\n", 1, "host", "must be text, got 127"),
    ("state_dir: [a, b]\n", 1, "state_dir", "must be a path, got ['a', 'b']"),
    ("partitions: 2.5\n", 1, "partitions", "must be a whole number, got 2.5"),
    ("las_thresholds: [60, no]\n", 1, "las_thresholds", "must be a list of numbers"),
    ("agnostic: 1\n", 1, "agnostic", "must be true or false, got 1"),
])
def test_an_error_names_the_file_the_line_and_the_key(tmp_path, text, line, key, message):
    with pytest.raises(InputError) as raised:
        load_settings_file(config(tmp_path, text))

    assert (raised.value.source, raised.value.line, raised.value.field) == (str(tmp_path / "server.yaml"), line, key)
    assert raised.value.message.startswith(message)


def test_what_is_printed_reads_back_to_the_same_settings(tmp_path):
    settings = replace(DEFAULTS, state_dir=tmp_path / "state", slots="cpu:2", round_s=30.0, checkpoint_every="off",
                       policy="max-min-fairness", policy_options={"share_by": "rate", "partitions": 4})
    read = load_settings_file(config(tmp_path, settings_yaml(settings)))

    assert replace(DEFAULTS, **read.values, policy_options=read.policy_options) == settings


@pytest.mark.parametrize("changes, in_file, message", [
    ({"round_s": 0.0}, (), "--round-s must be positive, got 0"),
    ({"ray_address": "10.0.0.1:6379"}, (), "--ray-address needs --executor ray"),
    ({"ray_address": "10.0.0.1:6379"}, ("ray_address",), "--ray-address needs executor: ray"),
    ({"executor": "ray", "slots": "cpu:2"}, (), "--slots: on Ray the slots are the cluster's GPUs; declare their "
                                                "types in --cluster FILE (docs/ray.md)"),
    ({"token": "a", "token_file": Path("t")}, (), "--token cannot be combined with --token-file: give one"),
    ({"checkpoint_every": "sometimes"}, (), "--checkpoint-every expected auto, auto:SECONDS, off or SECONDS"),
    ({"market": ("synthetic",)}, (), "--market needs --executor ray: rented instances join a Ray cluster as its nodes"),
    ({"market": ("synthetic",)}, ("market",), "--market needs executor: ray"),
    ({"provisioning": "spot-fallback"}, (), "--provisioning needs --market FILE (or synthetic)"),
    ({"executor": "ray", "market": ("synthetic",), "provisioning": "cheapest"}, (),
     "--provisioning must be one of static, cheapest-now, cheapest-now:daily, spot-fallback, deadline-aware"),
])
def test_check_settings_names_other_settings_as_their_origin_spells_them(changes, in_file, message):
    with pytest.raises(SettingError) as raised:
        check_settings(replace(ServeSettings(), **changes), in_file=in_file)

    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("key, value, message", [
    ("round_s", float("nan"), "--round-s must be positive, got nan"),
    ("grace_s", float("nan"), "--grace-s must be >= 0, got nan"),
    ("round_s", float("inf"), "--round-s must be finite, got inf"),
])
def test_not_a_number_and_infinity_are_refused(key, value, message):
    with pytest.raises(SettingError, match=message):
        check_settings(replace(ServeSettings(), **{key: value}))


@pytest.mark.parametrize("text, message", [
    (f"port: {10**400}\n", "must be a whole number, got 1000000"),
    (f"round_s: {10**400}\n", "must be a number of seconds, got 1000000"),
    (f"las_thresholds: [{10**400}]\n", "must be a list of numbers, got [1000000"),
    ("host: " + "x" * 500 + "\nround_s: [" + "1, " * 500 + "1]\n", "must be a number of seconds, got [1, 1, 1"),
])
def test_a_value_too_large_for_any_setting_is_refused_in_one_short_line(tmp_path, text, message):
    with pytest.raises(InputError) as raised:
        load_settings_file(config(tmp_path, text))

    assert raised.value.message.startswith(message) and len(str(raised.value)) < 200


def test_the_provisioning_names_are_the_provisioning_policies():
    from apportion.policies.provisioning import PROVISIONING as POLICIES
    from apportion.serve.app.settings import PROVISIONING

    assert PROVISIONING == tuple(POLICIES)


def test_market_is_one_file_or_a_list_of_them_and_synthetic_stands_alone(tmp_path):
    """Real price histories come one file per region and type: the file's market key takes a list."""
    config = tmp_path / "server.yaml"
    config.write_text("executor: ray\nmarket:\n  - spot/us-east-1.json\n  - spot/us-west-2.json\n")
    assert load_settings_file(config).values["market"] == ("spot/us-east-1.json", "spot/us-west-2.json")
    config.write_text("market: 7\n")
    with pytest.raises(InputError, match="server.yaml:1: field 'market': must be a market file, a list of them"):
        load_settings_file(config)
    with pytest.raises(SettingError, match="--market synthetic is a market of its own"):
        check_settings(replace(ServeSettings(), executor="ray", market=("synthetic", "a.json")))
