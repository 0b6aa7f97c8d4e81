"""A Slurm cluster on this machine, for tests and benchmarks: munged, slurmctld and one slurmd per node.

``LocalSlurm(directory, nodes={"n1": {"h100": 2}, ...}).start()`` writes ``slurm.conf`` and
``gres.conf`` (made-up GPU types, ``AutoDetect=off``, counts with no device files), starts the
daemons in ``directory`` and returns the environment (``SLURM_CONF``) that the Slurm commands need
to reach it. Several nodes share this host, each slurmd on its own port (``NodeName=... Port=...``);
``stop`` ends only the processes it started, by their pids, and removes the configuration (in a
temporary directory every account may read: a job runs as its own account). Accounting: none
(``accounting_storage/none``), finished jobs in a ``jobcomp/filetxt`` file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str:
    """Why a local Slurm cannot be started here ('' when it can): a daemon or command not installed, or not root."""
    absent = [name for name in (*DAEMONS, "sbatch", "squeue", "scontrol", "scancel")
              if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "a local Slurm's slurmd must run as root"
    return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurm:
    """munged + slurmctld + one slurmd per node, all on this host, all files under ``directory``."""

    def __init__(self, directory: Path, nodes: dict[str, dict[str, int]], *, cpus: int = 8, memory_mb: int = 4000,
                 partition: str = "gpus", kill_wait_s: int = 30) -> None:
        self.dir = Path(directory)
        self.nodes = nodes
        self.cpus, self.memory_mb, self.partition, self.kill_wait_s = cpus, memory_mb, partition, kill_wait_s
        self.pids: dict[str, int] = {}
        self.host = socket.gethostname()
        self.conf = self.dir / "slurm.conf"
        self.socket = self.dir / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this cluster's commands."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        d = self.dir
        for sub in ("state", "log", "munge", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # slurm.conf, gres.conf and slurmd's spool (each job's script) must be readable by the job's own account
        # (sbatch --uid): a directory of their own that every account may read, whatever ``directory``'s parents allow
        self.public = Path(tempfile.mkdtemp(prefix="apportion-slurm-"))
        self.public.chmod(0o755)
        self.conf = self.public / "slurm.conf"
        self.socket = self.public / "munge.socket"  # every account's srun asks munged for a credential
        self.spool = self.public / "spool"
        for name in self.nodes:
            (self.spool / name).mkdir(parents=True)
        ctld_port = _free_port()
        lines = [
            "ClusterName=apportion", f"SlurmctldHost={self.host}(127.0.0.1)", f"SlurmctldPort={ctld_port}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={self.socket}",
            "CredType=cred/munge", f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={self.spool}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'log'}/slurmd-%n.pid",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={d / 'jobcomp.txt'}", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2", "SlurmdParameters=config_overrides",
            "GresTypes=gpu", f"KillWait={self.kill_wait_s}", "MinJobAge=600", "InactiveLimit=0", "Waittime=0",
            "SlurmdTimeout=30", "MessageTimeout=10", "SchedulerParameters=sched_interval=1,bf_interval=1",
            "LaunchParameters=use_interactive_step",
        ]
        gres_lines = ["AutoDetect=off"]
        for name, gres in self.nodes.items():
            port = _free_port()
            gres_text = ",".join(f"gpu:{t}:{n}" for t, n in gres.items())
            lines.append(f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} CPUs={self.cpus}"
                         f" RealMemory={self.memory_mb} State=UNKNOWN" + (f" Gres={gres_text}" if gres else ""))
            for gpu_type, count in gres.items():  # Slurm drops a GPU with no device file: links to /dev/null
                files = []
                for i in range(count):
                    link = d / "dev" / f"{name}-{gpu_type}-{i}"
                    link.unlink(missing_ok=True)
                    link.symlink_to("/dev/null")
                    files.append(str(link))
                gres_lines.append(f"NodeName={name} Name=gpu Type={gpu_type} File={','.join(files)}")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE"
                     " State=UP OverSubscribe=NO")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.public / "gres.conf").write_text("\n".join(gres_lines) + "\n")

    def start(self, timeout: float = 30.0) -> dict[str, str]:
        """Write the configuration and start the daemons; the environment the commands need. RuntimeError
        (with the daemons' logs' tail) when they do not come up within ``timeout``."""
        self.write_config()
        d = self.dir
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self._spawn("munged", [_binary("munged"), "-F", "-f", f"--socket={self.socket}", f"--key-file={key}",
                               f"--log-file={d / 'log' / 'munged.log'}", f"--pid-file={d / 'munge' / 'munged.pid'}",
                               f"--seed-file={d / 'munge' / 'seed'}"])
        self._wait(lambda: self.socket.exists(), timeout, "munged")
        env = {**os.environ, **self.env}
        self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)], env)
        self._wait(lambda: self._ok(["scontrol", "ping"]), timeout, "slurmctld")
        for name in self.nodes:
            self._spawn(f"slurmd:{name}", [_binary("slurmd"), "-D", "-N", name, "-f", str(self.conf)], env)
        self._wait(self._nodes_idle, timeout, "slurmd")
        return self.env

    def __enter__(self) -> LocalSlurm:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> None:
        out = open(self.dir / "log" / f"{name.replace(':', '-')}.out", "ab")
        self.pids[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True).pid
        out.close()

    def _ok(self, argv: list[str]) -> bool:
        done = subprocess.run(argv, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=10)
        return done.returncode == 0

    def _nodes_idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env={**os.environ, **self.env},
                              capture_output=True, text=True, timeout=10)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return set(states) == set(self.nodes) and all(s == "idle" for s in states.values())

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError, ValueError):
                pass
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted((self.dir / "log").glob("*")) if p.is_file())
        self.stop()
        raise RuntimeError(f"{what} did not come up within {timeout:g} s\n{logs}")

    def scontrol(self, *args: str) -> str:
        """Run ``scontrol ARGS`` on this cluster (to drain or resume a node); its output."""
        done = subprocess.run(["scontrol", *args], env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=10, check=True)
        return done.stdout

    def cancel_all(self, wait_s: float = 10.0) -> None:
        """Cancel every job of this cluster (its own, none other: the commands reach this slurmctld only)
        and wait for their processes to go."""
        env = {**os.environ, **self.env}
        try:
            ids = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                 timeout=10).stdout.split()
            if ids:
                subprocess.run(["scancel", "--signal=KILL", "--full", *ids], env=env, capture_output=True, timeout=10)
                subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=10)
            deadline = time.monotonic() + wait_s
            while ids and time.monotonic() < deadline:
                if not subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                      timeout=10).stdout.split():
                    break
                time.sleep(0.2)
        except (OSError, subprocess.SubprocessError):
            pass

    def stop(self) -> None:
        """Cancel the cluster's jobs, then end the daemons this object started (by pid; slurmd first)."""
        if "slurmctld" in self.pids:
            self.cancel_all()
        for name in sorted(self.pids, key=lambda n: DAEMONS.index(n.split(":")[0]), reverse=True):
            pid = self.pids.pop(name)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        public = getattr(self, "public", None)
        if public is not None:
            shutil.rmtree(public, ignore_errors=True)
