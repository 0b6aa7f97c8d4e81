"""What a ``--run-as mapped`` server checks when it starts, rather than let every job fail: each
account in the user map exists and is not root (refused at start), each can run python on
``--job-path`` and this server's Python, homes and the state directory are closed to others
(warnings in the server's log)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from apportion.serve.accounts.runas import RunAs, mapped_accounts, start_warnings
from apportion.serve.app.server import ServerError, ServerOptions, serve


@pytest.mark.parametrize("account, said", [
    ("root", "--user-map: user 'mallory' maps to OS account 'root', which is root: jobs never run as root; map that"
             " user to another account, or remove it"),
    ("no-such-account-here", "--user-map: user 'mallory' maps to OS account 'no-such-account-here', which does not"
                             " exist on this machine; map that user to another account, or remove it"),
])
def test_a_map_naming_root_or_a_missing_account_does_not_start(tmp_path, account, said):
    run_as = RunAs("mapped", {"alice": "nobody", "mallory": account})
    with pytest.raises(ValueError) as err:
        mapped_accounts(run_as)
    assert str(err.value) == said
    options = ServerOptions(state_dir=tmp_path / "state", token=secrets.token_urlsafe(32), run_as=run_as, port=0)
    with pytest.raises(ServerError) as refused:
        serve(options, [], None, log=print)
    assert str(refused.value) == said
    assert not (tmp_path / "state").exists()  # refused before anything was created
    assert mapped_accounts(RunAs("mapped", {"alice": "nobody"}))["alice"].name == "nobody"


@pytest.fixture
def open_home():
    """A throwaway OS account whose home is 0755 (root only)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("making an OS account needs root and useradd")
    home = Path(tempfile.mkdtemp(prefix="apportion-home-"))
    os.chmod(home, 0o755)
    name = f"aphome{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        os.chown(home, *(lambda a: (a.pw_uid, a.pw_gid))(__import__("pwd").getpwnam(name)))
        yield name, home
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_what_would_fail_every_job_or_open_a_home_is_warned_of_at_start(tmp_path, open_home):
    name, home = open_home
    private = Path(tempfile.mkdtemp(prefix="apportion-python-"))  # a Python only root may run
    try:
        os.chmod(private, 0o700)
        os.symlink(sys.executable, private / "python3")
        state = tmp_path / "state"
        state.mkdir(mode=0o755)
        os.chmod(state, 0o755)
        warned = start_warnings(RunAs("mapped", {"alice": name}, job_path=f"{private}:/nonexistent"), state,
                                str(private / "python3"))
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert warned == [
        f"OS account {name} can run no python on --job-path {private}:/nonexistent ({private}/python3: Permission"
        f" denied; {private}/python: Permission denied): every job of its users that runs python will fail; set"
        " --job-path to where it may run one",
        f"OS account {name} cannot run this server's Python ({private}/python3: Permission denied): its jobs never"
        " start warm, and those that run it fail",
        f"the home of OS account {name}, {home}, is 0755: other accounts' jobs can reach what it holds; make it 0700"
        f" (chmod 700 {home})",
        f"the state directory {state} is 0755: others can read or change it; it should be 0711 (chmod 711)",
    ]


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no system Python here")
def test_nothing_is_warned_of_when_the_account_can_run_python_and_its_home_is_closed(tmp_path, open_home):
    name, home = open_home
    os.chmod(home, 0o700)
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o711)
    assert start_warnings(RunAs("mapped", {"alice": name}), state, "/usr/bin/python3") == []
