"""`apportion users`, and the clients with credentials, against a real server that has users
(its jobs are the torch-free stand-in, contract_job.py, which renews its lease with its
attempt's own credential)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from serve_helpers import AS_ROOT, CONTRACT_JOB, Server, wait_for

runner = CliRunner()


def cli(*args: str, **env: str):
    return runner.invoke(app, list(args), env={"APPORTION_TOKEN": None, **env})


def token_file(directory: Path, name: str, credential: str, mode: int = 0o600) -> Path:
    path = directory / f"{name}.token"
    path.write_text(credential + "\n")
    os.chmod(path, mode)
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-auth")
    state = base / "state"
    files = {}
    for name, extra in (("alice", ()), ("bob", ()), ("boss", ("--admin",))):
        added = runner.invoke(app, ["users", "add", name, "--state-dir", str(state), *extra])
        assert added.exit_code == 0, added.output
        files[name] = token_file(base, name, added.stdout.strip())
    with Server(state, "--slots", "cpu:2", "--round-s", "2", "--grace-s", "3") as server:
        yield server, files


def job_file(directory: Path, name: str, steps: int = 20) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: [{sys.executable}, {CONTRACT_JOB}]\ntotal_steps: {steps}\n"
                    "env: {STEP_S: '0.02'}\n")
    return path


def test_users_add_prints_the_credential_once_and_list_shows_no_secret(tmp_path):
    added = runner.invoke(app, ["users", "add", "ann", "--admin", "--state-dir", str(tmp_path)])
    assert added.exit_code == 0
    credential = added.stdout.strip()
    assert re.fullmatch(r"u1\.[0-9a-f]{64}", credential)
    listed = runner.invoke(app, ["users", "list", "--state-dir", str(tmp_path)])
    assert re.fullmatch(r"ann  admin  added \S+ \S+  active\n", listed.stdout)
    assert credential.split(".")[1] not in listed.stdout
    again = runner.invoke(app, ["users", "add", "ann", "--state-dir", str(tmp_path)])
    assert again.exit_code == 2 and again.output.startswith("error: user 'ann' already has a credential")
    assert runner.invoke(app, ["users", "revoke", "ann", "--state-dir", str(tmp_path)]).exit_code == 0
    assert "revoked" in runner.invoke(app, ["users", "list", "--state-dir", str(tmp_path)]).stdout


def test_a_users_job_is_theirs_runs_to_its_end_and_only_they_or_an_admin_cancel_it(cluster, tmp_path):
    server, files = cluster
    submitted = cli("submit", str(job_file(tmp_path, "quick")), "--server", server.url,
                    "--token-file", str(files["alice"]))
    assert submitted.exit_code == 0, submitted.output
    job_id = re.search(r"submitted job (\d+): quick \(alice, 1 slot\(s\), 20 steps\)", submitted.output).group(1)
    done = wait_for(lambda: next((j for j in server.jobs(files["alice"].read_text().strip())
                                  if j["id"] == job_id and j["status"] == "completed"), None), 30,
                    "the job to complete, renewing its lease with its own credential", server)
    assert done["steps_done"] == 20

    long = cli("submit", str(job_file(tmp_path, "long", steps=100000)), "--server", server.url,
               "--token-file", str(files["alice"]))
    long_id = re.search(r"submitted job (\d+)", long.output).group(1)
    refused = cli("cancel", long_id, "--server", server.url, "--token-file", str(files["bob"]))
    assert refused.exit_code == 2
    assert refused.output.strip() == f"error: job {long_id} belongs to 'alice', not 'bob'"
    as_alice = cli("cancel", long_id, "--user", "alice", "--server", server.url, "--token-file", str(files["bob"]))
    assert as_alice.exit_code == 2 and "acting as 'alice' is for admins" in as_alice.output
    logs = cli("logs", long_id, "--server", server.url, "--token-file", str(files["bob"]))
    assert logs.exit_code == 2 and "only they or an admin may read its logs" in logs.output
    by_admin = cli("cancel", long_id, "--server", server.url, "--token-file", str(files["boss"]))
    assert by_admin.exit_code == 0, by_admin.output


def test_the_credential_comes_from_a_file_the_environment_or_the_users_config(cluster, tmp_path):
    server, files = cluster
    credential = files["bob"].read_text().strip()
    assert cli("queue", "--server", server.url, APPORTION_TOKEN=credential).exit_code == 0
    config = tmp_path / "config"
    (config / "apportion").mkdir(parents=True)
    token_file(config / "apportion", "token", credential)
    os.replace(config / "apportion" / "token.token", config / "apportion" / "token")
    assert cli("status", "--server", server.url, XDG_CONFIG_HOME=str(config)).exit_code == 0
    os.chmod(config / "apportion" / "token", 0o644)
    loose = cli("status", "--server", server.url, XDG_CONFIG_HOME=str(config))
    assert loose.exit_code == 2
    assert loose.output.strip() == (f"error: {config}/apportion/token: other users may read it (mode 644): chmod 600 "
                                    f"{config}/apportion/token")
    with_flag = cli("queue", "--server", server.url, "--token", credential, XDG_CONFIG_HOME=str(tmp_path))
    assert with_flag.exit_code == 0 and "warning: --token is visible to every user of this machine" in with_flag.output


def test_without_a_credential_it_is_one_line(cluster, tmp_path):
    server, _ = cluster
    result = cli("queue", "--server", server.url, XDG_CONFIG_HOME=str(tmp_path))
    assert result.exit_code == 2
    assert result.output.strip() == ("error: this server requires a credential (Authorization: Bearer ...): "
                                     "--token-file, APPORTION_TOKEN or ~/.config/apportion/token")


@pytest.mark.parametrize("args, env, message", [
    (["--token", " "], {}, "error: --token is empty: a credential needs a secret"),
    ([], {"APPORTION_TOKEN": " \t"}, "error: APPORTION_TOKEN is empty: a credential needs a secret"),
])
def test_an_empty_or_whitespace_token_is_refused_in_one_line(args, env, message):
    result = cli("queue", "--server", "http://127.0.0.1:9", *args, **env)
    assert result.exit_code == 2
    assert result.output.strip() == message


def test_an_empty_token_file_is_refused_in_one_line(tmp_path):
    empty = token_file(tmp_path, "empty", "  ")
    result = cli("status", "--token-file", str(empty))
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --token-file {empty} is empty: a credential needs a secret"


@pytest.mark.parametrize("args, message", [
    (["--token", " "], "error: --token is empty: a credential needs a secret"),
    (["--token-file", "/nonexistent/token"], "error: --token-file /nonexistent/token: cannot read it: No such file or directory"),
    (["--user-map", "/nonexistent/map.yaml", "--run-as", "mapped"], "error: --user-map /nonexistent/map.yaml: No such file or directory"),
])
def test_serve_refuses_an_unusable_credential_or_map_in_one_line(tmp_path, args, message):
    result = cli("serve", "--port", "0", "--state-dir", str(tmp_path / "state"), "--slots", "cpu:1", *AS_ROOT, *args)
    assert result.exit_code == 2
    assert result.output.strip() == message
    assert not (tmp_path / "state").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a server running as root")
def test_serve_as_root_refuses_unless_told_which_account_runs_jobs(tmp_path):
    result = cli("serve", "--port", "0", "--state-dir", str(tmp_path / "state"), "--slots", "cpu:1")
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: apportion serve is running as root, and would run every job as"
                                            " root: give --run-as mapped --user-map FILE")
