"""`apportion serve --config server.yaml`: the file's settings reach the server, flags override
them, and a bad key or value is named with its file and line. The server itself is replaced by
a stand-in that keeps what it was given (tests/serve/test_serve_cli.py starts a real one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import apportion.serve.app.server
from apportion.cli import app

runner = CliRunner()
AS_ROOT = ("--run-as", "server-user") if os.geteuid() == 0 else ()  # a root server refuses to run jobs as root


@pytest.fixture
def started(monkeypatch):
    """What `apportion serve` started the server with: options, slots and policy."""
    calls = []

    def serve(options, slots, policy, log, ready=None, executor=None, sock=None):
        calls.append({"options": options, "slots": [s.id for s in slots], "policy": policy})
        if sock is not None:
            sock.close()

    monkeypatch.setattr(apportion.serve.app.server, "serve", serve)
    return calls


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def serve(*args: str):
    return runner.invoke(app, ["serve", "--port", "0", *AS_ROOT, *args])


def test_the_file_sets_the_servers_settings(tmp_path, started):
    config = write(tmp_path / "server.yaml", "round_s: 60\nslots: cpu:3\nmax_retries: 5\nhung_after_s: 120\n"
                                             "grace_s: 7\ncheckpoint_every: 300\nwarm_start: false\n"
                                             "policy: fifo\nstate_dir: state\n")
    result = serve("--config", str(config))

    assert result.exit_code == 0, result.output
    [call] = started
    options = call["options"]
    assert (options.round_s, options.max_retries, options.hung_after_s, options.grace_s) == (60.0, 5, 120.0, 7.0)
    assert options.checkpoint_every == "300" and options.warm_start is False
    assert options.state_dir == tmp_path / "state"  # relative to the file, not to where serve ran
    assert call["slots"] == ["cpu:0", "cpu:1", "cpu:2"] and call["policy"].name == "fifo"


def test_a_flag_given_overrides_the_file_and_a_default_does_not(tmp_path, started):
    config = write(tmp_path / "server.yaml", "round_s: 60\nslots: cpu:3\ngrace_s: 7\n")
    result = serve("--config", str(config), "--round-s", "180", "--slots", "cpu:1",
                   "--state-dir", str(tmp_path / "elsewhere"))

    assert result.exit_code == 0, result.output
    options = started[0]["options"]
    assert options.round_s == 180.0  # given, though it is the default
    assert options.grace_s == 7.0 and started[0]["slots"] == ["cpu:0"]
    assert options.state_dir == tmp_path / "elsewhere"


def test_the_received_share_rule_comes_from_the_file_or_the_flag_and_a_bad_one_is_named(tmp_path, started):
    config = write(tmp_path / "server.yaml", "slots: cpu:1\nstate_dir: state\nreceived_since: arrival\n")

    assert serve("--config", str(config)).exit_code == 0
    assert serve("--config", str(config), "--received-since", "allocation").exit_code == 0
    assert serve("--slots", "cpu:1", "--state-dir", str(tmp_path / "s")).exit_code == 0
    assert [call["options"].received_since for call in started] == ["arrival", "allocation", "allocation"]

    bad = serve("--config", str(write(tmp_path / "bad.yaml", "slots: cpu:1\nreceived_since: start\n")))
    assert bad.exit_code == 2
    assert "bad.yaml:2: field 'received_since': must be one of allocation, arrival, got 'start'" in bad.output


def test_policy_options_come_from_the_file_and_flags_override_them(tmp_path, started):
    config = write(tmp_path / "server.yaml", "policy: max-min-fairness\nshare_by: rate\nwater_filling: true\n"
                                             "slots: cpu:2\nstate_dir: state\n")
    result = serve("--config", str(config), "--share-by", "gpu-time")

    assert result.exit_code == 0, result.output
    policy = started[0]["policy"]
    assert policy.water_filling is True and policy.share_by == "gpu-time"
    assert started[0]["options"].policy_options == {"water_filling": True, "share_by": "gpu-time"}


def test_a_list_of_thresholds_and_a_queues_file_relative_to_the_config(tmp_path, started):
    (tmp_path / "conf").mkdir()
    write(tmp_path / "conf" / "queues.yaml", "queues:\n  - name: research\n    nominal: {cpu: 1}\n")
    config = write(tmp_path / "conf" / "server.yaml", "policy: hierarchical\nqueues: queues.yaml\nslots: cpu:2\n"
                                                      f"state_dir: {tmp_path / 'state'}\n")
    assert serve("--config", str(config)).exit_code == 0
    assert started[0]["options"].policy_options == {"queues": str(tmp_path / "conf" / "queues.yaml")}

    config = write(tmp_path / "conf" / "las.yaml", f"las_thresholds: [100, 2000]\nslots: cpu:1\n"
                                                   f"state_dir: {tmp_path / 'state'}\n")
    assert serve("--config", str(config)).exit_code == 0
    assert list(started[1]["policy"].thresholds_gpu_s) == [100.0, 2000.0]


@pytest.mark.parametrize("text, message", [
    ("slots: cpu:1\nround_s: -3\n", "server.yaml:2: field 'round_s': must be positive, got -3"),
    ("# a comment\nround-s: 60\n", "server.yaml:2: field 'round-s': unknown setting; did you mean 'round_s'?"),
    ("port: 80\ngrace: 5\n", "server.yaml:2: field 'grace': unknown setting; did you mean 'grace_s'?"),
    ("max_retries: three\n", "server.yaml:1: field 'max_retries': must be a whole number, got 'three'"),
    ("warm_start: yes\n", "server.yaml:1: field 'warm_start': must be true or false, got 'yes'"),
    ("\nhung_after_s: 5\n", "server.yaml:2: field 'hung_after_s': must be 0 (never) or from 10 to 604800 seconds, "
                            "got 5"),
    ("executor: lokal\n", "server.yaml:1: field 'executor': must be local, ray or slurm, got 'lokal'"),
    ("ray_address: 10.0.0.1:6379\n", "server.yaml:1: field 'ray_address': needs executor: ray"),
    ("slots: cpu:zero\n", "server.yaml:1: field 'slots': 'cpu:zero' is not TYPE:COUNT (e.g. 'cpu:2' or 'h100:4')"),
    ("slots: cpu:1\npolicy: fifo\nlas_thresholds: 5\n", "server.yaml:3: field 'las_thresholds': applies to las only"),
    ("slots: cpu:1\npolicy: nope\n", "server.yaml:2: field 'policy': unknown policy 'nope'"),
    ("slots: cpu:1\nround_s: 60\nround_s: 30\n", "server.yaml:3: duplicate key 'round_s' (first on line 2)"),
    ("- round_s\n", "server.yaml:1: a server config file must be a mapping of settings"),
])
def test_a_bad_key_or_value_is_named_with_its_line(tmp_path, started, text, message):
    config = write(tmp_path / "server.yaml", text)
    result = serve("--config", str(config), "--state-dir", str(tmp_path / "state"))

    assert result.exit_code == 2 and not started
    assert " ".join(result.output.split()).startswith(f"error: {tmp_path}/{message}"), result.output


def test_a_bad_flag_is_still_named_as_a_flag_when_a_file_is_given(tmp_path, started):
    config = write(tmp_path / "server.yaml", "round_s: -3\n")
    result = serve("--config", str(config), "--round-s", "0")

    assert result.exit_code == 2
    assert result.output.strip() == "error: --round-s must be positive, got 0"


def test_a_missing_config_file_is_named(tmp_path):
    result = serve("--config", str(tmp_path / "nowhere.yaml"))

    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path}/nowhere.yaml: no such server config file"


def test_a_token_in_a_file_others_may_read_is_refused(tmp_path, started):
    config = write(tmp_path / "server.yaml", "slots: cpu:1\ntoken: s3cret-admin\n", mode=0o644)
    result = serve("--config", str(config), "--state-dir", str(tmp_path / "state"))

    assert result.exit_code == 2 and not started
    assert " ".join(result.output.split()).startswith(
        f"error: {config}:2: field 'token': is a secret, but other users may read it (mode 644): chmod 600 {config}")

    config.chmod(0o600)
    result = serve("--config", str(config), "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 0, result.output
    assert started[0]["options"].token == "s3cret-admin" and "warning" not in result.output


def test_a_token_file_named_in_the_config_is_read_relative_to_it(tmp_path, started):
    write(tmp_path / "admin.token", "t0ken\n", mode=0o600)
    config = write(tmp_path / "server.yaml", "token_file: admin.token\nslots: cpu:1\nstate_dir: state\n")
    result = serve("--config", str(config))

    assert result.exit_code == 0, result.output
    assert started[0]["options"].token == "t0ken"


def test_print_config_prints_the_settings_in_effect_and_reads_back_the_same(tmp_path, started):
    config = write(tmp_path / "server.yaml", "round_s: 60\nslots: cpu:2\nshare_by: rate\nstate_dir: st\n"
                                             "policy: max-min-fairness\n")
    printed = serve("--config", str(config), "--grace-s", "5", "--print-config")

    assert printed.exit_code == 0, printed.output
    settings = yaml.safe_load(printed.stdout)
    assert settings["round_s"] == 60.0 and settings["grace_s"] == 5.0 and settings["share_by"] == "rate"
    assert settings["state_dir"] == str(tmp_path / "st") and settings["port"] == 0 and settings["max_retries"] == 3
    assert not started  # printed, not started

    again = write(tmp_path / "printed.yaml", printed.stdout)
    assert runner.invoke(app, ["serve", "--config", str(again), "--print-config"]).stdout == printed.stdout


def test_print_config_never_prints_the_token(tmp_path):
    config = write(tmp_path / "server.yaml", "token: s3cret-admin\n", mode=0o600)
    printed = serve("--config", str(config), "--print-config")

    assert printed.exit_code == 0, printed.output
    assert "s3cret" not in printed.output and "# token: given, not shown" in printed.stdout


def test_the_example_file_names_every_setting_at_its_default():
    from apportion.serve.app.settings import SETTINGS
    from apportion.serve.app.settings_file import policy_option_keys

    example = Path(__file__).resolve().parents[2] / "examples" / "server.yaml"
    keys = yaml.safe_load(example.read_text())
    assert set(keys) == {*SETTINGS, "user_budgets", *policy_option_keys()}

    from_example = runner.invoke(app, ["serve", "--config", str(example), "--print-config"])
    defaults = runner.invoke(app, ["serve", "--print-config"])
    assert from_example.exit_code == 0, from_example.output
    assert from_example.stdout == defaults.stdout


def test_a_token_file_flag_replaces_the_files_token(tmp_path, started):
    write(tmp_path / "other.token", "flag-t0ken\n", mode=0o600)
    config = write(tmp_path / "server.yaml", "token: file-t0ken\nslots: cpu:1\nstate_dir: state\n", mode=0o600)
    result = serve("--config", str(config), "--token-file", str(tmp_path / "other.token"))

    assert result.exit_code == 0, result.output
    assert started[0]["options"].token == "flag-t0ken"


def test_docs_show_the_example_file_as_it_is():
    root = Path(__file__).resolve().parents[2]

    assert (root / "examples" / "server.yaml").read_text() in (root / "docs" / "serve.md").read_text()


@pytest.mark.parametrize("mode, owner, says", [
    (0o664, None, "other users may change it (mode 664): chmod go-w"),
    (0o646, None, "other users may change it (mode 646): chmod go-w"),
    (0o644, 65534, "it is owned by another user (uid 65534), who could change it: chown"),
])
def test_a_config_file_another_account_may_change_is_refused_with_the_fix(tmp_path, started, mode, owner, says):
    if owner is not None and os.geteuid() != 0:
        pytest.skip("giving a file to another account takes root")
    config = write(tmp_path / "server.yaml", "slots: cpu:1\nstate_dir: state\n", mode=mode)
    if owner is not None:
        os.chown(config, owner, -1)
    result = serve("--config", str(config))

    assert result.exit_code == 2 and not started
    assert " ".join(result.output.split()).startswith(f"error: {config}: {says}")


def test_a_repeated_market_flag_rents_from_every_file_given(tmp_path):
    """Real price histories come one file per region and type: `serve --market A --market B` reads both
    (the last no longer silently wins), as the settings file's list does."""
    from types import SimpleNamespace

    from apportion.cli.serve import _Origins, _provisioner
    from apportion.serve.app.settings import ServeSettings

    spot = ('{"SpotPriceHistory": [{"AvailabilityZone": "%s", "InstanceType": "p3.2xlarge", '
            '"ProductDescription": "Linux/UNIX", "SpotPrice": "0.9", "Timestamp": "2024-01-01T00:00:00Z"}]}')
    east, west = write(tmp_path / "east.json", spot % "us-east-1a"), write(tmp_path / "west.json", spot % "us-west-2a")
    result = serve("--executor", "ray", "--market", str(east), "--market", str(west), "--print-config")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["market"] == [str(east), str(west)]
    settings = ServeSettings(executor="ray", market=(str(east), str(west)))
    provisioner = _provisioner(settings, _Origins(None, frozenset()), SimpleNamespace(executor=None),
                               [SimpleNamespace(gpu_type="v100")])
    assert {"aws/us-east-1/p3.2xlarge (us-east-1a)/spot", "aws/us-west-2/p3.2xlarge (us-west-2a)/spot"} <= set(
        provisioner.market.labels)
