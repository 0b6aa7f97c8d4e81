"""Print the total speed of three real jobs under ``apportion serve`` on this machine, with the node's
CPU cores split evenly (``--cpu-split proportional``) and then for the most progress (``aware``).

Two jobs' data loaders are CPU-bound (each batch costs ``--loader-ms`` of CPU time) and one job's
batches are free; each step then takes ``--step-ms`` on the "accelerator" (a sleep). The server
offers three CPU slots on this machine's cores (``--slots cpu:3``: cores are the scarce thing), so
the even split gives each job a third of them, and the aware split profiles each job, then gives
the cores the cheap job does not need to the two that wait for data. Each run measures steps/s
per job over ``--measure-s`` after ``--warmup-s`` (long enough for the aware split's profiles),
and prints one JSON line: the split, the total steps/s, the two CPU-bound jobs' together, each
job's, the cores each was held to, how they were held (affinity, and a CPU quota where a cgroup
is writable), and the machine's load average: a quota caps a job's CPU, it cannot give it CPU
that other processes on a busy machine take, so the splits differ only where the quotas bind.
The defaults (40 ms of CPU a batch, 5 ms steps) make a decoder job want about 0.9 of a core,
more than its even share of two cores (0.67): at 20 ms and 10 ms it would want exactly its share,
and no split could speed it up.

    python benchmarks/compare/data_stalls_local.py                 # both splits, about 2 minutes
    python benchmarks/compare/data_stalls_local.py --measure-s 60
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apportion.serve.client import Client

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parents[1] / "jobs" / "loader_job.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(state_dir: Path, split: str, cores: int | None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    slots = "cpu:3" + (f",cores:{cores}" if cores else "")
    command = [sys.executable, "-m", "apportion.cli", "serve", "--state-dir", str(state_dir), "--port", str(port),
               "--slots", slots, "--cpu-split", split, "--policy", "fifo", "--round-s", "600",
               "--no-warm-start", *(("--run-as", "server-user") if os.geteuid() == 0 else ())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    server = subprocess.Popen(command, stdout=open(state_dir.parent / f"{split}-server.out", "wb"),
                              stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {(state_dir.parent / f'{split}-server.out').read_text()}")
        try:
            Client(url, timeout=2).status()
            return server, url
        except Exception:
            time.sleep(0.2)
    raise RuntimeError("the server did not answer within 60 s")


def call(url: str, method: str, *args):
    """One call on a fresh connection (an idle kept-alive one may have been closed meanwhile)."""
    with Client(url, timeout=10) as client:
        return getattr(client, method)(*args)


def steps_of(url: str) -> dict[str, int]:
    return {j["name"]: int(j["steps_done"]) for j in call(url, "jobs") if j["status"] == "running"}


def run(split: str, args, root: Path) -> dict:
    state_dir = root / split
    server, url = start_server(state_dir, split, args.cores)
    try:
        for name, loader_ms in (("decoder-a", args.loader_ms), ("decoder-b", args.loader_ms), ("cheap", 0)):
            call(url, "submit", {"name": name, "command": [sys.executable, str(JOB)], "total_steps": 10**7,
                                 "workdir": str(REPO), "checkpoint_every": "off", "user": "bench",
                                 "env": {"LOADER_CPU_MS": str(loader_ms), "STEP_MS": str(args.step_ms)}})
        deadline = time.time() + 60
        while len([s for s in steps_of(url).values() if s > 0]) < 3:
            if time.time() > deadline:
                raise RuntimeError(f"the jobs did not all start: {call(url, 'jobs')}")
            time.sleep(0.2)
        time.sleep(args.warmup_s)
        first, t0 = steps_of(url), time.time()
        time.sleep(args.measure_s)
        last, t1 = steps_of(url), time.time()
        cores = call(url, "status")["cores"]
        per_job = {name: round((last[name] - first[name]) / (t1 - t0), 2) for name in first}
        names = {str(j["id"]): j["name"] for j in call(url, "jobs")}
        return {"split": split, "total_steps_per_s": round(sum(per_job.values()), 2),
                "cpu_bound_steps_per_s": round(per_job["decoder-a"] + per_job["decoder-b"], 2), "steps_per_s": per_job,
                "cores": {names[i]: c for i, c in cores["jobs"].items()}, "node_cores": cores["node_cores"],
                "held_by": cores["held_by"], "window_s": round(t1 - t0, 1), "loader_ms": args.loader_ms,
                "step_ms": args.step_ms, "load_average_1m": os.getloadavg()[0]}
    finally:
        stop(server, url)


def stop(server: subprocess.Popen, url: str) -> None:
    """Cancel the jobs, wait for their attempts to end (they outlive a server), then stop the server."""
    try:
        for job in call(url, "jobs"):
            call(url, "cancel", job["id"], "bench")
        deadline = time.time() + 30
        while time.time() < deadline and any(j["status"] in ("running", "queued") or j["reason"].endswith("stopping")
                                             for j in call(url, "jobs")):
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader-ms", type=float, default=40.0, help="CPU time each batch of a decoder job costs")
    parser.add_argument("--step-ms", type=float, default=5.0, help="a step's time on the accelerator (a sleep)")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="seconds before measuring (the aware profiles)")
    parser.add_argument("--measure-s", type=float, default=25.0, help="seconds measured")
    parser.add_argument("--cores", type=int, default=None, help="the node's cores (default: all this server may use)")
    parser.add_argument("--quick", action="store_true",
                        help="1 s of warm-up and 1 s measured per split: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.warmup_s, args.measure_s = 1.0, 1.0
    with tempfile.TemporaryDirectory(prefix="data-stalls-") as root:
        results = [run(split, args, Path(root)) for split in ("proportional", "aware")]
    even = results[0]["total_steps_per_s"]
    results[1]["over_proportional"] = round(results[1]["total_steps_per_s"] / even, 3) if even else None
    even_cpu_bound = results[0]["cpu_bound_steps_per_s"]
    results[1]["cpu_bound_over_proportional"] = (round(results[1]["cpu_bound_steps_per_s"] / even_cpu_bound, 3)
                                                 if even_cpu_bound else None)
    for result in results:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
