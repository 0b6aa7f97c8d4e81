"""`apportion serve` shares the cluster by user unless told not to; weights come from a flag or the
config file, and a bad one is named. The server is replaced by a stand-in that keeps its options
(tests/fidelity/test_fidelity_replay.py and tests/serve/test_two_clocks.py run the sharing itself)."""

from __future__ import annotations

from serve_stand_in import config_file as config, serve, started  # noqa: F401 (a fixture)


def test_the_server_shares_by_user_by_default_and_a_flag_turns_it_off(tmp_path, started):
    assert serve(tmp_path).exit_code == 0
    assert serve(tmp_path, "--no-share-by-user").exit_code == 0
    assert [(o.share_by_user, o.user_weights) for o in started] == [(True, {}), (False, {})]


def test_weights_come_from_the_flag_or_the_config_file(tmp_path, started):
    assert serve(tmp_path, "--user-weights", "alice=2,bob=1").exit_code == 0
    path = config(tmp_path, "user_weights: {alice: 3, carol: 0.5}\n")
    assert serve(tmp_path, "--config", str(path)).exit_code == 0
    path = config(tmp_path, "user_weights: alice=4\nshare_by_user: false\n")
    assert serve(tmp_path, "--config", str(path)).exit_code == 0
    assert [(o.share_by_user, o.user_weights) for o in started] == [
        (True, {"alice": 2.0, "bob": 1.0}), (True, {"alice": 3.0, "carol": 0.5}), (False, {"alice": 4.0})]


def test_a_bad_weight_is_named_with_its_flag_or_line(tmp_path, started):
    result = serve(tmp_path, "--user-weights", "alice=0")
    assert result.exit_code == 2
    assert "--user-weights: alice's weight must be a positive number, got '0'" in result.output
    result = serve(tmp_path, "--user-weights", "alice")
    assert result.exit_code == 2 and "--user-weights: must be USER=WEIGHT" in result.output
    path = config(tmp_path, "slots: cpu:1\nuser_weights: {bob: -1}\n")
    result = serve(tmp_path, "--config", str(path))
    assert result.exit_code == 2
    assert "server.yaml:2: field 'user_weights': bob's weight must be a positive number, got '-1'" in result.output
    path = config(tmp_path, "share_by_user: 1\n")
    result = serve(tmp_path, "--config", str(path))
    assert result.exit_code == 2 and "field 'share_by_user': must be true or false" in result.output
    assert started == []


def test_print_config_writes_the_sharing_back(tmp_path, started):
    result = serve(tmp_path, "--user-weights", "alice=2", "--print-config")
    assert result.exit_code == 0
    assert "share_by_user: true" in result.output and "user_weights: alice=2" in result.output
