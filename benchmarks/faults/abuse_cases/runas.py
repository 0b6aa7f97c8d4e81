"""``--run-as mapped`` (root, two throwaway OS accounts with 0700 homes): alice names a ``workdir``
in bob's home, one that is there and one that is not, and compares the answers; then a server
is started with a user map naming root. Needs root and ``useradd`` (otherwise it reports nothing)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from abuse_server import APPORTION, Server, free_port, row

NAME = "runas"
ABOUT = "mapped accounts: alice probes bob's 0700 home through a job's workdir; a user map naming root"


def _accounts(homes: Path) -> dict[str, str]:
    """Two OS accounts, alice's and bob's, with 0700 homes under ``homes``; their names."""
    names = {}
    for who in ("alice", "bob"):
        name = f"apab{who[0]}{secrets.token_hex(3)}"
        home = homes / who
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        names[who] = name
        home.mkdir(mode=0o700)
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    (homes / "bob" / "work").mkdir(mode=0o777)  # open itself, below bob's closed home
    os.chmod(homes / "bob" / "work", 0o777)
    return names


def _probe(server: Server, workdir: str):
    answer = server.request("POST", "/jobs", {"name": "peek", "command": "python train.py", "total_steps": 1,
                                              "workdir": workdir}, user="alice")
    try:
        message = answer.json().get("message", "")
    except ValueError:
        message = answer.body.decode(errors="replace")
    return answer.status, message.replace(workdir, "WORKDIR")


def _start_refused(map_file: Path, tmp: Path) -> int:
    """1 when a server whose user map names root refuses to start (within 30 s), else 0."""
    state = tmp / "root-state"
    subprocess.run([*APPORTION, "users", "add", "alice", "--state-dir", str(state)], capture_output=True, check=True)
    command = [*APPORTION, "serve", "--state-dir", str(state), "--port", str(free_port()), "--slots", "cpu:1",
               "--no-warm-start", "--run-as", "mapped", "--user-map", str(map_file)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.communicate(timeout=30)
        return 0
    return int(process.returncode != 0 and "root" in out)


def run(args) -> list[dict]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return [row(NAME, "skipped: needs root and useradd", 0, None, "")]
    homes = Path(tempfile.mkdtemp(prefix="apportion-homes-"))
    os.chmod(homes, 0o755)
    names: dict[str, str] = {}
    try:
        names = _accounts(homes)
        map_file = homes / "users.yaml"
        map_file.write_text(f"alice: {names['alice']}\nbob: {names['bob']}\n")
        with Server(users=("alice", "bob"), args=("--run-as", "mapped", "--user-map", str(map_file))) as server:
            there = _probe(server, str(homes / "bob" / "work"))
            missing = _probe(server, str(homes / "bob" / "nothing"))
        (homes / "root.yaml").write_text("alice: root\n")
        refused = _start_refused(homes / "root.yaml", homes)
    finally:
        for name in names.values():
            subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)
    return [
        row(NAME, "workdir in bob's 0700 home accepted for alice's job", int(there[0] == 200), 0, "jobs"),
        row(NAME, "answers that tell bob's existing path from a missing one", int(there != missing), 0, ""),
        row(NAME, "a user map naming root refused at start", refused, 1, "", meets="at least"),
    ]
