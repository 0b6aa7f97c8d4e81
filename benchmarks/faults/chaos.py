"""Kill everything at random and check that nothing is lost: prints one JSON object.

A workload of the example training scripts (half the jobs given as argument lists, half as
shell lines) runs on the real ``apportion serve`` with CPU slots, twice on fresh state
directories: once undisturbed (the clean pass), once while ``--kills`` seeded random
``kill -9``s hit the server (started again at once on the same state directory), the jobs'
training processes and their wrappers, spread over the clean pass's duration (with
``--no-clean-pass``, only the second, its kills spread over the time the reference runs suggest). Then:

- ``jobs_lost``: jobs that did not complete (failed, or unfinished at ``--timeout-s``);
- ``steps_redone``: steps redone *beyond* the last checkpoint: for each restart, how far the
  new attempt started below the newest checkpoint on disk when the previous one ended (the
  server's ``exit`` event records it); work after that checkpoint is lost to a crash by design;
- ``weights_identical``: every job's final weights checksum equals that of an uninterrupted
  standalone run of the same script and arguments;
- ``time_lost_fraction``: (chaos makespan - clean makespan) / clean makespan;
- ``cpu_s``: CPU seconds each pass spent, everything it started included (this process is the
  subreaper of all it starts and reaps what is orphaned, so every process's time is counted);
  with as many slots as cores, what the chaos pass spends beyond the clean one comes out of
  the training jobs' time; ``cpu_s_by_role``: the same split by what each process was when it
  spent it (the server; a spare wrapper importing and waiting; a wrapper; a job), sampled five
  times a second from ``/proc``, so a process's last fifth of a second before it ended is missed;
- ``lost_slot_s_by_target``, ``restarts_by_target``, ``kills_survived`` and
  ``time_lost_accounted_fraction``: where the chaos pass's time went, kill by kill, from the
  server's records (chaos_accounting.py): the same whatever else loads the machine, where the
  makespans of two passes run minutes apart are not.

    python benchmarks/faults/chaos.py                          # 50 jobs, 20 kills
    python benchmarks/faults/chaos.py --quick                  # the reduced form the tests run (4 jobs of half
                                                               # the steps, 4 kills, no clean pass, retries at once)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apportion.executors.local.executor import LocalExecutor, _cmdline  # noqa: E402
from apportion.executors.local.procfs import children, raw_stat, stat_fields  # noqa: E402
from apportion.executors.local.spare_pool import read_record, spare_options  # noqa: E402
from apportion.executors.local.wrapper import become_subreaper  # noqa: E402
from apportion.executors.local.wrapper_command import MARKER  # noqa: E402
from benchmarks.faults.chaos_accounting import account  # noqa: E402

FINAL = re.compile(r"^(final_checksum=\S+ param_sum=\S+ steps=\d+)", re.MULTILINE)
RESUMED = re.compile(r"resumed from step-\d+\.pt at step (\d+)/")
KEPT = re.compile(r"attempt (\d+): .*; (?:newest checkpoint step (\d+)|no checkpoint)$")
# script, its tiny-size arguments, total steps: each job trains a few seconds on one core
EXAMPLES = {
    "cnn": ("examples/train_cnn.py", ["--batch-size", "32", "--images", "512", "--log-every", "100"], 700),
    "lm": ("examples/train_lm.py", ["--batch-size", "16", "--sequences", "256", "--log-every", "50"], 250),
}


@dataclass(frozen=True)
class Planned:
    name: str
    example: str
    seed: int
    shell: bool  # a shell line (run under /bin/sh -c) rather than a list of arguments
    steps: int  # its total steps

    @property
    def config(self) -> tuple[str, int, int]:
        return self.example, self.seed, self.steps

    def argv(self) -> list[str]:
        script, args, _ = EXAMPLES[self.example]
        return ["python", script, "--seed", str(self.seed), *args]

    def spec(self) -> dict:
        argv = self.argv()
        return {"name": self.name, "command": " ".join(argv) if self.shell else argv,
                "total_steps": self.steps, "gpu_types": ["cpu"], "workdir": str(REPO),
                "env": {"PYTHONUNBUFFERED": "1"}, "user": "chaos"}


def workload(jobs: int, steps_scale: float = 1.0) -> list[Planned]:
    """Jobs of the two examples with a few seeds each, every other one a shell line; each of its example's
    total steps times ``steps_scale``."""
    seeds = max(1, min(5, jobs // 4))
    plans = []
    for i in range(jobs):
        example = "cnn" if i % 2 == 0 else "lm"
        plans.append(Planned(f"{example}-{i}", example, (i // 2) % seeds, i % 4 >= 2,
                             max(1, round(EXAMPLES[example][2] * steps_scale))))
    return plans


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


def references(plans: list[Planned], parallel: int) -> dict[tuple[str, int, int], str]:
    """The final checksum line of an uninterrupted standalone run of each distinct job."""
    todo = sorted({p.config: p for p in plans}.values(), key=lambda p: p.config)
    done, running = {}, []
    while todo or running:
        while todo and len(running) < parallel:
            plan = todo.pop(0)
            argv = [sys.executable, *plan.argv()[1:], "--steps", str(plan.steps)]
            running.append((plan, subprocess.Popen(argv, cwd=REPO, env=environment(), stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True)))
        plan, process = running.pop(0)
        out, _ = process.communicate()
        found = FINAL.findall(out)
        if process.returncode != 0 or not found:
            raise RuntimeError(f"the reference run of {plan.config} failed:\n{out[-2000:]}")
        done[plan.config] = found[-1]
    return done


class Server:
    """``apportion serve`` on a loopback port, killed and started again at will."""

    def __init__(self, state_dir: Path, port: int, args: list[str]) -> None:
        self.state_dir, self.port, self.args = state_dir, port, args
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        command = [sys.executable, "-m", "apportion.cli", "serve", "--state-dir", str(self.state_dir),
                   "--port", str(self.port), *self.args]
        with open(self.state_dir.parent / f"{self.state_dir.name}-server.out", "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment(),
                                            cwd=REPO, start_new_session=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            try:
                httpx.get(f"{self.url}/status", timeout=1.0).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not answer in time")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        for attempt in LocalExecutor(self.state_dir).scan():
            LocalExecutor(self.state_dir).kill_attempt(attempt)

    def jobs(self) -> list[dict] | None:
        try:
            return httpx.get(f"{self.url}/jobs", timeout=5.0).json()
        except httpx.HTTPError:
            return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def training_processes(state_dir: Path) -> dict[int, int]:
    """The example scripts' processes of the attempts running now (not their shells or wrappers), by
    pid, with their job's id: found by their environment, so that a job whose wrapper was killed
    (and which runs on under the server) is found too; a job forked warm by a spare wrapper shows
    the spare's command line and environment, and is found by its spare's record instead."""
    prefix = f"APPORTION_CHECKPOINT_DIR={os.path.realpath(state_dir)}/".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name)) or []
        spare = spare_options(argv)
        if spare is not None:  # a spare's fork (not the spare itself, which leads its group) is a job
            fields = stat_fields(int(entry.name))
            record = read_record(Path(os.path.realpath(state_dir)), spare["--spare"])
            if fields is not None and int(fields[2]) != int(entry.name) and record is not None:
                found[int(entry.name)] = int(record["job"])
            continue
        if not any("examples/train_" in a for a in argv) or "-c" in argv or MARKER in argv:  # not a shell, a wrapper
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(prefix) for v in environ):
            job = next((v.split(b"=", 1)[1] for v in environ if v.startswith(b"APPORTION_JOB_ID=")), b"0")
            found[int(entry.name)] = int(job)
    return found


class CpuByRole:
    """CPU seconds of a pass's processes (those naming its state directory), by what each was when it spent them."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(os.path.realpath(state_dir))
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start) -> CPU seconds at the last sample
        self.by_role = {"server": 0.0, "spare_waiting": 0.0, "wrapper": 0.0, "job": 0.0}
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            argv = _cmdline(pid) or []
            if not any(str(self.state_dir) in a for a in argv) and not self._cold_job(pid, argv):
                continue
            fields = stat_fields(pid)
            if fields is None:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / self.tick
            key = (pid, int(fields[19]))
            before = self.seen.get(key, 0.0)
            self.seen[key] = cpu
            self.by_role[self._role(pid, argv, fields)] += cpu - before

    def _cold_job(self, pid: int, argv: list[str]) -> bool:
        """A job started cold (or its shell): an example script whose checkpoints go to this state directory."""
        if not any("examples/train_" in a for a in argv):
            return False
        try:
            return f"APPORTION_CHECKPOINT_DIR={self.state_dir}/".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False

    def _role(self, pid: int, argv: list[str], fields: list[str]) -> str:
        if "serve" in argv and MARKER not in argv:
            return "server"
        spare = spare_options(argv)
        if spare is not None:
            if int(fields[2]) != pid:  # forked from a spare wrapper: the job itself
                return "job"
            return "wrapper" if read_record(self.state_dir, spare["--spare"]) is not None else "spare_waiting"
        return "wrapper" if MARKER in argv else "job"


def reap_orphans(keep: int | None) -> None:
    """Reap this process's children that have ended (orphans it inherited as their subreaper), but ``keep``."""
    for pid in children(os.getpid()):
        fields = raw_stat(pid)
        if pid != keep and fields is not None and fields[0] == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pass(plans: list[Planned], state_dir: Path, server_args: list[str], kill_times: list[float],
             rng: random.Random, timeout_s: float) -> dict:
    """Submit every job, kill at ``kill_times`` (seconds after the first submit), wait for the end."""
    cpu_before = children_cpu_s()
    server = Server(state_dir, free_port(), server_args)
    server.start()
    kills: list[dict] = []
    cpu_by_role = CpuByRole(state_dir)
    try:
        started = time.time()
        for plan in plans:
            httpx.post(f"{server.url}/jobs", json=plan.spec(), timeout=30).raise_for_status()
        pending = list(kill_times)
        kinds = kinds_in_turn(rng)
        jobs = []
        while time.time() - started < timeout_s:
            now = time.time() - started
            if pending and now >= pending[0]:
                pending.pop(0)
                kills.append(kill_one(server, state_dir, rng, now, next(kinds)))
            listed = server.jobs()
            if listed is not None:
                jobs = listed
                if len(jobs) == len(plans) and all(j["status"] in ("completed", "failed", "cancelled") for j in jobs):
                    break
            reap_orphans(keep=server.process.pid)
            cpu_by_role.sample()
            time.sleep(0.2)
        makespan = time.time() - started
    finally:
        server.stop()
    deadline = time.time() + 30
    while children(os.getpid()) and time.time() < deadline:  # what the pass left ends, and is counted
        reap_orphans(keep=None)
        time.sleep(0.1)
    return {"jobs": jobs, "makespan_s": makespan, "kills": kills, "cpu_s": children_cpu_s() - cpu_before,
            "cpu_s_by_role": {role: round(cpu, 1) for role, cpu in cpu_by_role.by_role.items()}}


KINDS = ("server", "job", "wrapper")


def kinds_in_turn(rng: random.Random):
    """What each kill aims at: the three kinds in a seeded order, each once before any comes again, so
    that even a few kills hit the server, a training process and a wrapper."""
    while True:
        yield from rng.sample(KINDS, len(KINDS))


def kill_one(server: Server, state_dir: Path, rng: random.Random, at: float, kind: str) -> dict:
    """``kill -9`` one of: the server (started again at once), a training process, a wrapper (``kind``; where
    no process of that kind runs now, the other of the last two, else the server)."""
    wrappers = {a.pid: a.job_id for a in LocalExecutor(state_dir).scan()}
    targets = {"server": {server.process.pid: None}, "job": training_processes(state_dir), "wrapper": wrappers}
    if not targets[kind]:
        kind = next(k for k in (("wrapper", "job") if kind == "job" else ("job", "wrapper")) + ("server",) if targets[k])
    pid = rng.choice(sorted(targets[kind]))
    when = time.time()
    if kind == "server":
        server.kill()
        server.start()
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"at_s": round(at, 2), "target": kind, "pid": pid, "job": targets[kind][pid], "time": when,
            **({"back_s": round(time.time() - when, 2)} if kind == "server" else {})}


def steps_redone(state_dir: Path, job: dict) -> int:
    """Steps a restart redid below the newest checkpoint the previous attempt left."""
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        details = [d for (d,) in db.execute("SELECT detail FROM events WHERE job_id = ? AND event = 'exit'"
                                            " ORDER BY id", (int(job["id"]),))]
    finally:
        db.close()
    kept = {int(m.group(1)): int(m.group(2) or 0) for m in map(KEPT.match, details) if m}
    redone = 0
    for attempt in range(2, job["attempts"] + 1):
        log = state_dir / "jobs" / job["id"] / f"attempt-{attempt}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        found = RESUMED.search(text)
        if found is None and f"attempt {attempt}: periodic checkpoints" not in text:
            continue  # killed before it restored anything or took a step: it redid nothing
        resumed = int(found.group(1)) if found else 0
        redone += max(0, kept.get(attempt - 1, 0) - resumed)
    return redone


def final_line(state_dir: Path, job: dict) -> str | None:
    log = state_dir / "jobs" / job["id"] / f"attempt-{job['attempts']}.log"
    found = FINAL.findall(log.read_text(errors="replace")) if log.exists() else []
    return found[-1] if found else None


def judge(plans: list[Planned], result: dict, state_dir: Path, expected: dict) -> dict:
    by_name = {j["name"]: j for j in result["jobs"]}
    lost, redone, differ, attempts = [], 0, [], 0
    for plan in plans:
        job = by_name.get(plan.name)
        if job is None or job["status"] != "completed":
            lost.append(plan.name)
            continue
        attempts += job["attempts"]
        redone += steps_redone(state_dir, job)
        if final_line(state_dir, job) != expected[plan.config]:
            differ.append(plan.name)
    return {"lost": lost, "steps_redone": redone, "weights_differ": differ, "attempts": attempts}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=2, help="CPU slots (one core each)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="the most each pass may take")
    parser.add_argument("--keep", help="keep both passes' state directories under this directory")
    parser.add_argument("--no-warm-start", action="store_true", help="every job start cold (serve --no-warm-start)")
    parser.add_argument("--no-clean-pass", action="store_true",
                        help="only the pass under kills, spread over the time the reference runs suggest the "
                             "jobs take; no time lost is measured")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help="each job's total steps times this (the kills land over the time the jobs take)")
    parser.add_argument("--retry-backoff-s", type=float,
                        help="serve --retry-backoff-s (the wait before a crashed job's retry; the server's default "
                             "where not given)")
    parser.add_argument("--quick", action="store_true",
                        help="4 jobs of half the steps, 4 kills, seed 1, no clean pass, crashed jobs retried at once: "
                             "the reduced form tests/serve/test_chaos.py runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.kills, args.seed, args.timeout_s, args.no_clean_pass = 4, 4, 1, 400.0, True
        args.steps_scale, args.retry_backoff_s = 0.5, 0.0

    plans = workload(args.jobs, args.steps_scale)
    server_args = ["--slots", f"cpu:{args.slots}", "--policy", "fifo", "--round-s", "30",
                   "--max-retries", str(args.kills + 3),  # a job may be hit by every kill and must not fail
                   "--run-as", "server-user",  # the jobs run as this account, root included
                   *(["--no-warm-start"] if args.no_warm_start else []),
                   *([] if args.retry_backoff_s is None else ["--retry-backoff-s", str(args.retry_backoff_s)])]
    began = time.time()
    become_subreaper()  # every process a pass starts is reaped here in the end: its CPU time is counted
    referenced = time.time()
    expected = references(plans, args.slots)
    # one job's time as the references ran (as many at once as there are slots), times the waves of jobs
    foreseen_s = (time.time() - referenced) / math.ceil(len(expected) / args.slots) * math.ceil(len(plans) / args.slots)
    with tempfile.TemporaryDirectory(prefix="apportion-chaos-") as tmp:
        if args.keep:
            tmp = args.keep
            Path(tmp).mkdir(parents=True, exist_ok=True)
        clean_dir, chaos_dir = Path(tmp) / "clean", Path(tmp) / "chaos"
        clean = None if args.no_clean_pass else run_pass(plans, clean_dir, server_args, [], random.Random(args.seed),
                                                          args.timeout_s)
        rng = random.Random(args.seed)
        # kills land while jobs still run, spread over the run
        window = 0.8 * (foreseen_s if clean is None else clean["makespan_s"])
        kill_times = sorted(rng.uniform(0.05 * window, window) for _ in range(args.kills))
        chaos = run_pass(plans, chaos_dir, server_args, kill_times, rng, args.timeout_s)
        clean_judged = None if clean is None else judge(plans, clean, clean_dir, expected)
        chaos_judged = judge(plans, chaos, chaos_dir, expected)
        accounted = account(chaos_dir, chaos["kills"], args.slots, chaos["makespan_s"])
    kinds = [k["target"] for k in chaos["kills"]]

    def clean_and_chaos(clean_value, chaos_value):
        return {"clean": None if clean is None else clean_value(), "chaos": chaos_value}

    return {
        "jobs": len(plans),
        "kills": len(chaos["kills"]),
        "kills_by_target": {kind: kinds.count(kind) for kind in ("server", "job", "wrapper")},
        "jobs_lost": len(chaos_judged["lost"]),
        "steps_redone": chaos_judged["steps_redone"],
        "weights_identical": not chaos_judged["weights_differ"] and not chaos_judged["lost"],
        "time_lost_fraction": None if clean is None else
        round((chaos["makespan_s"] - clean["makespan_s"]) / clean["makespan_s"], 4),
        **accounted,
        "clean_makespan_s": None if clean is None else round(clean["makespan_s"], 2),
        "chaos_makespan_s": round(chaos["makespan_s"], 2),
        "attempts": clean_and_chaos(lambda: clean_judged["attempts"], chaos_judged["attempts"]),
        "cpu_s": clean_and_chaos(lambda: round(clean["cpu_s"], 1), round(chaos["cpu_s"], 1)),
        "cpu_s_by_role": clean_and_chaos(lambda: clean["cpu_s_by_role"], chaos["cpu_s_by_role"]),
        "clean_pass_ok": None if clean is None else not clean_judged["lost"] and not clean_judged["weights_differ"]
        and clean_judged["steps_redone"] == 0,
        "lost": chaos_judged["lost"],
        "weights_differ": chaos_judged["weights_differ"],
        "shell_line_jobs": sum(p.shell for p in plans),
        "slots": args.slots,
        "warm_start": not args.no_warm_start,
        "seed": args.seed,
        "kill_log": chaos["kills"],
        "wall_s": round(time.time() - began, 1),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
