"""Token files and the per-user credential file are trusted only when no other account may read
or change them: a group- or world-writable one, or one owned by another account, is refused with
the command that fixes it (apportion/serve/base/trusted_file.py)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.serve.accounts.auth import read_secret_file

runner = CliRunner()
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account takes root")


def secret(tmp_path, mode: int = 0o600, owner: int | None = None):
    path = tmp_path / "admin.token"
    path.write_text("t0ken\n")
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def test_an_owner_only_token_file_is_read(tmp_path):
    assert read_secret_file(secret(tmp_path)) == "t0ken"


@pytest.mark.parametrize("mode, says", [
    (0o602, "other users may change it (mode 602): chmod 600"),
    (0o620, "other users may change it (mode 620): chmod 600"),
    (0o666, "other users may change it (mode 666): chmod 600"),
    (0o640, "other users may read it (mode 640): chmod 600"),
])
def test_a_token_file_others_may_change_or_read_is_refused_with_the_fix(tmp_path, mode, says):
    path = secret(tmp_path, mode)
    with pytest.raises(ValueError) as caught:
        read_secret_file(path)
    assert str(caught.value) == f"{path}: {says} {path}"


@as_root
def test_a_token_file_owned_by_another_account_is_refused_with_the_fix(tmp_path):
    path = secret(tmp_path, owner=65534)
    with pytest.raises(ValueError) as caught:
        read_secret_file(path)
    assert str(caught.value) == f"{path}: it is owned by another user (uid 65534), who could change it: chown root {path}"


def test_a_client_with_a_world_writable_token_file_stops_before_sending_anything(tmp_path):
    path = secret(tmp_path, 0o606)
    result = runner.invoke(app, ["queue", "--server", "http://127.0.0.1:9", "--token-file", str(path)],
                           env={"APPORTION_TOKEN": None})
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --token-file {path}: other users may change it (mode 606): chmod 600 {path}"


@as_root
def test_a_server_with_a_foreign_owned_token_file_does_not_start(tmp_path):
    path = secret(tmp_path, owner=65534)
    result = runner.invoke(app, ["serve", "--port", "0", "--run-as", "server-user", "--state-dir",
                                 str(tmp_path / "state"), "--token-file", str(path)])
    assert result.exit_code == 2
    assert "it is owned by another user (uid 65534), who could change it: chown root" in result.output
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("mode, owner, says", [
    (0o666, None, "other users may change it (mode 666): chmod go-w"),
    (0o644, 65534, "it is owned by another user (uid 65534), who could change it: chown"),
])
def test_a_user_map_another_account_may_change_is_refused_with_the_fix(tmp_path, mode, owner, says):
    from apportion.serve.accounts.runas import load_user_map

    if owner is not None and os.geteuid() != 0:
        pytest.skip("giving a file to another account takes root")
    path = tmp_path / "users.yaml"
    path.write_text("alice: alice\n")
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, -1)
    with pytest.raises(ValueError) as caught:
        load_user_map(path)
    assert str(caught.value).startswith(f"--user-map {path}: {says}")
    path.chmod(0o644)
    os.chown(path, os.geteuid(), -1)
    assert load_user_map(path) == {"alice": "alice"}
