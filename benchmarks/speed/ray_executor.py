"""Print the Ray executor's latencies and round overhead next to the local executor's, as JSON.

Both executors run on this machine in the same run, on one slot each: the local executor's
``cpu:1``, and a one-node Ray cluster (``ray.cluster_utils``) whose slot is a custom resource
declared in a cluster file. Per executor, a real ``apportion serve`` (las, rounds of 2 s, its
first queue 5 GPU-seconds long) runs benchmarks/jobs/timed_job.py, which stamps its lines with
the wall clock:

- submit_to_first_step_s: from submitting a job to an idle server to the end of its first step;
- preemption_round_trip_s: from the running job learning that its lease is not renewed to the
  end of the first step of the job that preempted it, on the freed slot (checkpoint, exit,
  the server seeing it, the next attempt starting);
- resume_s: from the preempting job's end to the end of the first step of the preempted
  job's next attempt (restore included).

Medians over the repeats (every sample under "samples"). Then the round overhead with 1,000
queued jobs: the scheduler in this process (as benchmarks/speed/serve_overhead.py, fifo, a fake
clock), one attempt really running on two slots, each round timed (``round_ms``: the round
planner and, on Ray, the executor's count of live slots) and each tick (``tick_ms``: the
round and the executor's poll for exits).

    python benchmarks/speed/ray_executor.py                # 3 repeats, 1,000 queued jobs
    python benchmarks/speed/ray_executor.py --repeats 5 --jobs 10000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apportion.executors.local import LocalExecutor  # noqa: E402
from apportion.executors.ray_executor import RayExecutor  # noqa: E402
from apportion.executors.ray_nodes import declared  # noqa: E402
from apportion.policies.fifo import Fifo  # noqa: E402
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig  # noqa: E402
from apportion.serve.base.slots import Slot  # noqa: E402
from apportion.serve.store.state import StateStore  # noqa: E402

TIMED_JOB = REPO / "benchmarks" / "jobs" / "timed_job.py"
SLOT_RESOURCE = "bench_slot"  # the Ray server's one slot
PAIR_RESOURCE = "bench_pair"  # the round overhead's two slots
FIRST_STEP = re.compile(r"^(\d+\.\d+) first_step attempt=(\d+)", re.MULTILINE)
REFUSED = re.compile(r"^(\d+\.\d+) \[apportion\] attempt \d+: preempted at step", re.MULTILINE)
FINISHED = re.compile(r"^(\d+\.\d+) \[apportion\] attempt \d+: finished", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``apportion serve`` in a subprocess, for one executor."""

    def __init__(self, state_dir: Path, args: list[str]) -> None:
        self.state_dir = state_dir
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        as_root = ["--run-as", "server-user"] if os.geteuid() == 0 else []
        self.out = open(state_dir.parent / f"{state_dir.name}.out", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli", "serve", "--state-dir", str(state_dir), "--port",
             self.url.rsplit(":", 1)[1], *as_root, *args], stdout=self.out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        wait_until(self._up, 120, "the server to answer")

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the server exited: {(self.state_dir.parent / f'{self.state_dir.name}.out').read_text()}")
        try:
            return httpx.get(f"{self.url}/status", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def submit(self, name: str, steps: int, step_s: float) -> str:
        spec = {"name": name, "command": [sys.executable, str(TIMED_JOB), str(steps)], "total_steps": steps,
                "gpus": 1, "env": {"STEP_S": str(step_s)}, "user": "bench", "checkpoint_every": "off"}
        return httpx.post(f"{self.url}/jobs", json=spec, timeout=30).json()["id"]

    def job(self, job_id: str) -> dict:
        return httpx.get(f"{self.url}/jobs/{job_id}", timeout=30).json()

    def cancel(self, job_id: str) -> None:
        httpx.post(f"{self.url}/jobs/{job_id}/cancel", json={"user": "bench"}, timeout=30)

    def log(self, job_id: str, attempt: int) -> str:
        path = self.state_dir / "jobs" / job_id / f"attempt-{attempt}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self.out.close()


def wait_until(predicate, timeout: float, what: str, every: float = 0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def stamp(pattern: re.Pattern, text: str, attempt: int | None = None) -> float | None:
    for match in pattern.finditer(text):
        if attempt is None or int(match.group(2)) == attempt:
            return float(match.group(1))
    return None


def latencies(server: Server, repeats: int) -> dict:
    samples = {"submit_to_first_step_s": [], "preemption_round_trip_s": [], "resume_s": []}
    for r in range(repeats):
        submitted = time.time()
        first = server.submit(f"long-{r}", 1_000_000, 0.02)
        started = wait_until(lambda: stamp(FIRST_STEP, server.log(first, 1), 1), 120, "the first step")
        samples["submit_to_first_step_s"].append(started - submitted)
        time.sleep(5.5)  # past las's first queue (5 GPU-seconds): the next job preempts it, and stays ahead
        second = server.submit(f"short-{r}", 50, 0.02)
        refused = wait_until(lambda: stamp(REFUSED, server.log(first, 1)), 120, "the lease refusal")
        other = wait_until(lambda: stamp(FIRST_STEP, server.log(second, 1), 1), 120, "the other job's first step")
        samples["preemption_round_trip_s"].append(other - refused)
        ended = wait_until(lambda: stamp(FINISHED, server.log(second, 1)), 120, "the other job's end")
        resumed = wait_until(lambda: stamp(FIRST_STEP, server.log(first, 2), 2), 120, "the resumed first step")
        samples["resume_s"].append(resumed - ended)
        server.cancel(first)
        wait_until(lambda: server.job(first)["status"] == "cancelled", 120, "the cancel")
    result = {name: round(statistics.median(values), 3) for name, values in samples.items()}
    result["samples"] = {name: [round(v, 3) for v in values] for name, values in samples.items()}
    return result


def round_overhead(executor, slots: list[Slot], jobs: int, rounds: int, directory: Path) -> dict:
    """The scheduler's rounds and ticks with ``jobs`` queued and real attempts on ``slots``."""
    store = StateStore(directory / "state.db")
    config = ServeConfig(state_dir=directory, round_s=1.0, grace_s=60.0, renew_wait_s=0.0,
                         server_url="http://127.0.0.1:9")  # nothing listens: the jobs train on, unleased
    now = [time.time()]
    scheduler = Scheduler(store, executor, slots, Fifo(), config, clock=lambda: now[0])
    for i in range(jobs):
        scheduler.submit({"name": f"job{i}", "command": [sys.executable, str(TIMED_JOB), "1000000"],
                          "total_steps": 1_000_000, "env": {"STEP_S": "0.5"}, "checkpoint_every": "off"}, "bench")
    round_ms, tick_ms = [], []
    try:
        for _ in range(rounds):
            now[0] = max(time.time(), scheduler.next_plan_at + 1e-3)
            begin = time.perf_counter()
            scheduler.tick()
            tick_ms.append((time.perf_counter() - begin) * 1000)
            round_ms.append(scheduler.stats.last_ms)
            time.sleep(0.05)
        running = len(store.live_jobs())
    finally:
        for row in store.live_jobs():
            executor.kill(row.id)
        deadline = time.time() + 30
        while store.live_jobs() and time.time() < deadline:
            for ended in executor.poll():
                scheduler.lifecycle.on_exit(ended, time.time())
            time.sleep(0.1)
        store.close()
    return {"queued_jobs": jobs, "running_attempts": running, "rounds": rounds,
            "round_ms": {"median": round(statistics.median(round_ms), 2), "max": round(max(round_ms), 2)},
            "tick_ms": {"median": round(statistics.median(tick_ms), 2), "max": round(max(tick_ms), 2)}}


def local_only(args) -> None:
    """The local executor's round overhead alone (``--quick``): no Ray cluster, and no served jobs (their
    latencies wait on las's first queue and rounds of 2 s: half a minute, more than a quick run may take)."""
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "ray": "not run in quick mode (it starts a Ray cluster)",
              "latencies": "not run in quick mode (they wait on the server's rounds)"}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        (root / "overhead-local").mkdir()
        report["local"] = {}
        report["local"]["overhead"] = round_overhead(LocalExecutor(root / "overhead-local"),
                                                     [Slot("cpu:0", "cpu", ""), Slot("cpu:1", "cpu", "")],
                                                     args.jobs, args.rounds, root / "overhead-local")
    print(json.dumps(report, indent=1), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1000, help="queued jobs for the round overhead")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true",
                        help="the local executor's round overhead alone, 50 queued jobs (no Ray cluster, no served jobs): "
                        "what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.jobs, args.rounds = 1, 50, 2
        return local_only(args)
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "resources": {SLOT_RESOURCE: 1, PAIR_RESOURCE: 2}})
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_1m": os.getloadavg()[0]}}
    try:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            root = Path(tmp)
            cluster_file = root / "cluster.yaml"
            cluster_file.write_text(yaml.safe_dump({"ray": {"gpu_types": {"cpu": {"resource": SLOT_RESOURCE}}}}))
            serve_args = ["--round-s", "2", "--policy", "las", "--las-thresholds", "5", "--grace-s", "30"]
            for name, extra in (("local", ["--slots", "cpu:1"]),
                                ("ray", ["--executor", "ray", "--ray-address", cluster.address,
                                         "--cluster", str(cluster_file)])):
                server = Server(root / f"state-{name}", serve_args + extra)
                try:
                    report[name] = latencies(server, args.repeats)
                finally:
                    server.stop()
            slots = [Slot("cpu:0", "cpu", ""), Slot("cpu:1", "cpu", "")]
            (root / "overhead-local").mkdir()
            report["local"]["overhead"] = round_overhead(LocalExecutor(root / "overhead-local"), slots, args.jobs,
                                                         args.rounds, root / "overhead-local")
            (root / "overhead-ray").mkdir()
            ray_executor = RayExecutor(root / "overhead-ray", address=cluster.address)
            ray_executor.offer([declared("cpu", resource=PAIR_RESOURCE, nodes=ray_executor.nodes())])
            report["ray"]["overhead"] = round_overhead(ray_executor, slots, args.jobs, args.rounds,
                                                       root / "overhead-ray")
            report["machine"]["load_1m_after"] = os.getloadavg()[0]
            print(json.dumps(report, indent=1), flush=True)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
