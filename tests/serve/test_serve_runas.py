"""Which OS account runs a job (apportion/serve/accounts/runas.py): a root server refuses to run jobs as
root unless told; ``--run-as mapped`` runs each user's jobs as their OS account."""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.executors.local import LocalExecutor
from apportion.executors.local.wrapper import _account
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.accounts.runas import Account, NoAccount, RunAs, choose, load_user_map, lookup
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.app.server import ServerError, ServerOptions, check_credentials
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from serve_helpers import wait_for

NOBODY = pwd.getpwnam("nobody")
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="starting a job as another account needs root")


def test_a_root_server_refuses_unless_told_which_account_runs_jobs():
    with pytest.raises(ValueError, match=r"^apportion serve is running as root, and would run every job as root: "
                                         r"give --run-as mapped --user-map FILE"):
        choose(None, euid=0)
    assert choose("server-user", euid=0) == RunAs("server-user")  # said so: root jobs accepted
    assert choose(None, euid=1000) == RunAs("server-user")
    assert choose("refuse", euid=1000) == RunAs("server-user")  # not root: nothing to refuse


def test_mapped_needs_root_a_map_and_credentials():
    with pytest.raises(ValueError, match="--run-as mapped needs --user-map FILE"):
        choose("mapped", euid=0)
    with pytest.raises(ValueError, match="which needs a server running as root"):
        choose("mapped", euid=1000, user_map={"alice": "alice"})
    with pytest.raises(ValueError, match="--user-map is for --run-as mapped"):
        choose("server-user", euid=0, user_map={"alice": "alice"})
    with pytest.raises(ValueError, match="--run-as must be one of server-user, mapped, refuse, got 'sudo'"):
        choose("sudo", euid=0)
    mapped = ServerOptions(state_dir="/nonexistent", run_as=choose("mapped", euid=0, user_map={"alice": "alice"}))
    with pytest.raises(ServerError, match="--run-as mapped runs each job as its user's OS account, so users must"):
        check_credentials(mapped, has_users=False)
    check_credentials(mapped, has_users=True)


def test_the_user_map_is_yaml_or_json(tmp_path):
    (tmp_path / "map.yaml").write_text("alice: alice\nbob: robert  # his login\n")
    assert load_user_map(tmp_path / "map.yaml") == {"alice": "alice", "bob": "robert"}
    (tmp_path / "map.json").write_text('{"alice": "alice"}')
    assert load_user_map(tmp_path / "map.json") == {"alice": "alice"}
    (tmp_path / "list.yaml").write_text("- alice\n")
    with pytest.raises(ValueError, match=r"list.yaml: must map apportion users to OS accounts, e.g. 'alice: alice'"):
        load_user_map(tmp_path / "list.yaml")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"bad.json: not valid JSON"):
        load_user_map(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"missing.yaml: No such file"):
        load_user_map(tmp_path / "missing.yaml")


def test_a_user_mapped_twice_is_refused_with_its_line(tmp_path):
    (tmp_path / "map.yaml").write_text("alice: alice\nbob: bob\nalice: root\n")
    with pytest.raises(ValueError) as err:
        load_user_map(tmp_path / "map.yaml")
    assert str(err.value) == f"--user-map {tmp_path / 'map.yaml'}:3: duplicate key 'alice' (first on line 1)"
    (tmp_path / "map.json").write_text('{"alice": "alice", "alice": "root"}')
    with pytest.raises(ValueError, match=r"map.json: not valid JSON: duplicate key 'alice'"):
        load_user_map(tmp_path / "map.json")
    (tmp_path / "no.yaml").write_text("no: nobody\n")  # YAML 1.2: a user named no
    assert load_user_map(tmp_path / "no.yaml") == {"no": "nobody"}


def test_a_mapped_user_is_an_existing_account_other_than_root():
    mapped = RunAs("mapped", {"alice": "nobody", "mallory": "root", "carol": "no-such-account-here"})
    account = mapped.account("alice")
    assert (account.name, account.uid, account.gid) == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    assert account.environ() == {"HOME": NOBODY.pw_dir, "USER": "nobody", "LOGNAME": "nobody", "SHELL": NOBODY.pw_shell}
    with pytest.raises(NoAccount, match="maps to OS account 'root', which is root: jobs never run as root"):
        mapped.account("mallory")
    with pytest.raises(NoAccount, match="maps to OS account 'no-such-account-here', which does not exist"):
        mapped.account("carol")
    with pytest.raises(NoAccount, match="user 'dave' has no OS account in this server's --user-map"):
        mapped.account("dave")
    assert RunAs("server-user").account("alice") is None


def test_the_executor_is_asked_to_start_the_job_as_its_users_account(tmp_path):
    store = StateStore(tmp_path / "state.db")
    config = ServeConfig(state_dir=tmp_path, run_as=RunAs("mapped", {"alice": "nobody"}))
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(), config)
    client = TestClient(create_app(scheduler))
    headers = {name: {"Authorization": f"Bearer {add_user(store, name, admin=False, now=0.0)}"}
               for name in ("alice", "carol")}
    checkpoints = Path(tempfile.gettempdir()) / f"apportion-{os.getpid()}-{tmp_path.name}" / "ckpt"  # nobody may create it
    job = {"name": "j", "command": "python train.py", "total_steps": 10, "checkpoint_dir": str(checkpoints)}
    assert client.post("/jobs", json=job, headers=headers["alice"]).status_code == 200
    refused = client.post("/jobs", json=job, headers=headers["carol"])
    assert refused.status_code == 403 and refused.json()["detail"].startswith("user 'carol' has no OS account")
    scheduler.tick()
    account = scheduler.executor.accounts[(1, 1)]
    assert (account.name, account.uid, account.gid) == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    assert scheduler.executor.envs[(1, 1)]["HOME"] == NOBODY.pw_dir
    assert not checkpoints.exists()  # a named checkpoint directory is the job's to create, as nobody


def test_a_mapped_job_starts_from_a_clean_environment_never_the_servers(tmp_path, monkeypatch):
    for name, value in {"VIRTUAL_ENV": "/root/.venv", "PIP_INDEX_URL": "https://root:secret@pypi.internal/simple",
                        "PYENV_ROOT": "/root/.pyenv", "PATH": "/root/.venv/bin:/usr/bin"}.items():
        monkeypatch.setenv(name, value)  # what the shell that started the server had
    started = {}
    for mode, run_as in (("mapped", RunAs("mapped", {"alice": "nobody"}, job_path="/opt/lab/bin:/usr/bin:/bin")),
                         ("server-user", RunAs("server-user"))):
        store = StateStore(tmp_path / f"{mode}.db")
        scheduler = Scheduler(store, FakeExecutor(tmp_path / mode), parse_slots("cpu:1"), Las(),
                              ServeConfig(state_dir=tmp_path / mode, run_as=run_as))
        client = TestClient(create_app(scheduler))
        token = add_user(store, "alice", admin=False, now=0.0)
        job = {"name": "j", "command": "python train.py", "total_steps": 10, "env": {"MY_SETTING": "mine"}}
        assert client.post("/jobs", json=job, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        scheduler.tick()
        started[mode] = scheduler.executor.envs[(1, 1)]

    mapped = started["mapped"]
    assert {k: v for k, v in mapped.items() if not k.startswith("APPORTION_")} == {
        "HOME": NOBODY.pw_dir, "USER": "nobody", "LOGNAME": "nobody", "SHELL": NOBODY.pw_shell,
        "PATH": "/opt/lab/bin:/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "MY_SETTING": "mine",
        "OMP_NUM_THREADS": mapped["OMP_NUM_THREADS"], "MKL_NUM_THREADS": mapped["MKL_NUM_THREADS"],
        "CUDA_VISIBLE_DEVICES": ""}
    assert mapped["APPORTION_JOB_ID"] == "1" and mapped["APPORTION_TOKEN"]
    # as the server's own OS user the job is the server's account anyway: it keeps the server's environment
    assert started["server-user"]["VIRTUAL_ENV"] == "/root/.venv" and started["server-user"]["MY_SETTING"] == "mine"


def test_the_jobs_path_is_the_operators_and_absolute():
    from apportion.serve.app.settings import ServeSettings, SettingError, check_settings

    assert choose("mapped", euid=0, user_map={"alice": "alice"}).job_path == "/usr/local/bin:/usr/bin:/bin"
    assert check_settings(ServeSettings(job_path="/opt/conda/bin:/usr/bin")).job_path == "/opt/conda/bin:/usr/bin"
    for bad in ("bin:/usr/bin", "/usr/bin::/bin", ""):
        with pytest.raises(SettingError, match=r"^--job-path must be absolute directories separated by ':', got"):
            check_settings(ServeSettings(job_path=bad))


def test_the_wrapper_starts_the_command_as_the_account_it_is_given():
    assert _account(None) == {}
    assert _account(Account("x", 1001, 1002, (1002, 27)).argument()) == {"user": 1001, "group": 1002,
                                                                        "extra_groups": [1002, 27]}


@ROOT_ONLY
def test_a_root_server_runs_the_job_as_the_mapped_account(tmp_path):
    executor = LocalExecutor(tmp_path)
    command = ["/bin/sh", "-c", 'echo "$(id -u) $(id -g)"']
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    executor.start(1, 1, command, env, "/", (), run_as=lookup("nobody", "alice"))
    ended = wait_for(lambda: executor.poll(), 30, "the attempt to end")
    assert ended[0].code == 0, executor.tail(1, 1)
    assert executor.log_path(1, 1).read_text() == f"{NOBODY.pw_uid} {NOBODY.pw_gid}\n"
    assert os.stat(executor.log_path(1, 1)).st_uid == 0  # the log stays the server's
