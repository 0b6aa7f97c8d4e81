"""One replica of an attempt on a Ray node: a named, detached Ray actor that runs the job's process.

The Ray executor makes one ``Replica`` per bundle of the attempt's placement group (one per
GPU), and the replica holds its bundle's CPUs and memory (an even share of what the job file
asks, ``ray_room.job_bundle``). Each starts ``python -m apportion.executors.local.wrapper ... --
COMMAND`` on its node, as the local executor does on its machine, with the job's environment
plus torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` of rank 0's node) and the GPUs Ray gave it as
``CUDA_VISIBLE_DEVICES``. Its output goes to the attempt's log in the shared directory (rank 0:
``attempt-N.log``, rank R: ``attempt-N.rank-R.log``, whose first line names its node and the
CPUs and memory it holds), its exit code to the matching ``.exit`` file. The job's environment
goes to the wrapper in the matching ``.env`` file (owner-only, removed once read), not in the
wrapper's own environment, which is the node's (wrapper.py).

The actor is detached, so it outlives the server that started it; a new server finds it by
name and waits on it again. The process dies with the actor (the wrapper's ``--parent``):
when the actor's node dies, nothing of the attempt runs on.

Plain Python: the executor wraps the class with ``ray.remote``, and Ray imports this module
on the node (apportion must be installed there).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from apportion.executors.local.wrapper import write_env_file

WRAPPER = "apportion.executors.local.wrapper"
WATCH_S = 0.5  # how often a replica checks that its node's raylet is still there
# variables of the node's environment that are Ray's own or a job's (set again for each attempt)
_NOT_INHERITED = ("APPORTION_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def node_environment(base: dict[str, str], overlay: dict[str, str]) -> dict[str, str]:
    """The job's environment on this node: the node's own, less what each attempt sets, plus ``overlay``."""
    env = {k: v for k, v in base.items() if not (k.startswith(_NOT_INHERITED[0]) or k in _NOT_INHERITED[1:])}
    env.update(overlay)
    return env


def exit_code(exit_path: str, returncode: int) -> int | None:
    """The job's exit code as the wrapper recorded it; else the wrapper's own when it failed before
    the job ran; None when the wrapper was killed (no record)."""
    try:
        with open(exit_path, encoding="utf-8") as handle:
            return int(json.load(handle)["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return returncode if returncode >= 0 else None


def local_ranks(nodes: list[str], rank: int) -> tuple[int, int]:
    """``(LOCAL_RANK, LOCAL_WORLD_SIZE)`` of ``rank`` when rank ``r`` runs on node ``nodes[r]``."""
    mine = nodes[rank]
    return sum(1 for n in nodes[:rank] if n == mine), sum(1 for n in nodes if n == mine)


def held_words(resources: dict[str, float]) -> str:
    """`` holding 3 CPUs and 2 GiB``: the CPUs and memory Ray assigned to a replica ('' when none)."""
    cpus, memory = resources.get("CPU", 0.0), resources.get("memory", 0.0)
    held = [f"{cpus:g} CPU{'s' if cpus != 1 else ''}"] if cpus else []
    held += [f"{memory / 2**30:.3g} GiB"] if memory else []
    return f" holding {' and '.join(held)}" if held else ""


def _held() -> str:
    import ray

    return held_words(ray.get_runtime_context().get_assigned_resources())


class Replica:
    """Rank ``spec['rank']`` of an attempt; ``spec`` is plain data (see ``RayExecutor.start``)."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.process: subprocess.Popen | None = None
        self.code: int | None = None
        self.cancelled = False
        self.launched = threading.Event()  # launch() ran (or the replica was cancelled before)
        self.ended = threading.Event()  # the process ended (or never started)
        self.lock = threading.Lock()
        self.raylet = os.getppid()
        threading.Thread(target=self._watch_node, args=(self.raylet,), name="apportion-node-watch",
                         daemon=True).start()

    def _watch_node(self, raylet: int) -> None:
        """End the job and this actor as soon as the node's raylet is gone: Ray counts the node as
        dead and restarts the job elsewhere, so nothing of this attempt may run on."""
        while os.getppid() == raylet:
            time.sleep(WATCH_S)
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(1)

    def where(self) -> dict:
        """This replica's node: ``{"node_id", "ip", "raylet"}`` (``raylet``: its node's raylet is still there,
        as this replica sees it before Ray has noticed)."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "raylet": os.getppid() == self.raylet}

    def rendezvous(self) -> dict:
        """Rank 0: the address and a free port of its node, for torch.distributed's ``env://``."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as sock:
            sock.bind((ip, 0))
            port = sock.getsockname()[1]
        return {"addr": ip, "port": port}

    def launch(self, master: dict, *wheres: dict) -> dict:
        """Start the job's process on this node (``wheres``: every rank's node, in rank order)."""
        spec = self.spec
        rank, world = spec["rank"], spec["world_size"]
        local_rank, local_world = local_ranks([w["node_id"] for w in wheres], rank)
        overlay = dict(spec["env"])
        overlay.update({
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": master["addr"], "MASTER_PORT": str(master["port"]),
        })
        gpus = self._gpu_ids()
        if gpus is not None:
            overlay["CUDA_VISIBLE_DEVICES"] = gpus
        env = node_environment(dict(os.environ), overlay)
        me = wheres[rank]
        os.makedirs(spec["job_dir"], exist_ok=True, mode=0o700)
        env_path = os.path.splitext(spec["exit_path"])[0] + ".env"  # the job's, never the wrapper's own (wrapper.py)
        argv = ["/bin/sh", "-c", spec["command"]] if isinstance(spec["command"], str) else list(spec["command"])
        wrapper = [
            sys.executable, "-m", WRAPPER, "--state-dir", spec["state_dir"], "--job", str(spec["job_id"]),
            "--attempt", str(spec["attempt"]), "--slots", ",".join(spec["slots"]) or "-",
            "--exit-file", spec["exit_path"], "--env-file", env_path, "--workdir", spec["workdir"] or spec["job_dir"],
            "--parent", str(os.getpid()), "--", *argv,
        ]
        with self.lock:
            if self.cancelled:
                return {"node_id": me["node_id"], "ip": me["ip"], "pid": None}
            try:
                os.unlink(spec["exit_path"])
            except FileNotFoundError:
                pass
            write_env_file(env_path, env)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            with os.fdopen(os.open(spec["log_path"], flags, 0o600), "ab") as log:
                log.write((f"apportion: attempt {spec['attempt']} rank {rank} of {world} on Ray node {me['node_id']}"
                           f" ({me['ip']}){_held()}; rendezvous {master['addr']}:{master['port']}"
                           + (f"; CUDA_VISIBLE_DEVICES={gpus}" if gpus is not None else "") + "\n").encode())
                log.flush()
                started = threading.Event()
                failure: list[BaseException] = []
                # started from a thread that lives as long as the process: the wrapper's --parent
                # death signal fires when the thread that started it ends
                threading.Thread(target=self._supervise, args=(wrapper, node_environment(dict(os.environ), {}),
                                                               log.fileno(), started, failure),
                                 name="apportion-replica", daemon=True).start()
                started.wait()
                if failure:
                    log.write(f"apportion: cannot start the wrapper: {failure[0]}\n".encode())
                    try:  # no wrapper will read it
                        os.unlink(env_path)
                    except FileNotFoundError:
                        pass
            self.launched.set()
        return {"node_id": me["node_id"], "ip": me["ip"], "pid": self.process.pid if self.process else None}

    def _supervise(self, wrapper: list[str], env: dict, log_fd: int, started: threading.Event,
                   failure: list) -> None:
        try:
            self.process = subprocess.Popen(
                wrapper, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT, env=env,
                cwd=self.spec["job_dir"], start_new_session=True, close_fds=True,
            )
        except OSError as err:
            failure.append(err)
            self.code = 127
            self.ended.set()
            started.set()
            return
        started.set()
        returncode = self.process.wait()
        self.code = exit_code(self.spec["exit_path"], returncode)
        self.ended.set()

    def _gpu_ids(self) -> str | None:
        """The GPUs Ray gave this actor, as CUDA_VISIBLE_DEVICES (None when it asked for none)."""
        import ray

        if not self.spec.get("gpus"):
            return None
        return ",".join(str(g) for g in ray.get_gpu_ids())

    def wait(self) -> dict:
        """Block until the process ends: ``{"rank", "code"}`` (code None: it never started)."""
        self.launched.wait()
        self.ended.wait()
        return {"rank": self.spec["rank"], "code": self.code}

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to the process's group (SIGTERM followed by SIGCONT, so that a stopped job
        still gets it and may checkpoint); before launch, make sure it never starts."""
        with self.lock:
            if self.process is None:
                self.cancelled = True
                self.launched.set()
                self.ended.set()
                return False
        try:
            os.killpg(self.process.pid, signum)
            if signum == signal.SIGTERM:
                os.killpg(self.process.pid, signal.SIGCONT)
        except ProcessLookupError:
            return False
        return True

    def info(self) -> dict:
        """What a new server needs to adopt this attempt."""
        return {key: self.spec[key] for key in ("job_id", "attempt", "rank", "world_size", "slots")} | {
            "ended": self.ended.is_set(), "code": self.code}


