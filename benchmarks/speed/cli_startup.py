"""How long `apportion status` and `apportion queue` take against a live server, `import apportion`, and
`apportion --help` and `apportion simulate --help` (which looks for installed policy plugins: the one that pays for discovery).

Starts a server on a free port in a temporary state directory, then times each command
REPEATS times (wall clock, the whole process) next to a bare `python -c pass` in the same
run, and prints one JSON object with the medians in seconds.

    python benchmarks/speed/cli_startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wall_s(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true",
                        help="apportion status and a bare Python, once each: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as state_dir:
        env = dict(os.environ, APPORTION_SERVER=url, XDG_CONFIG_HOME=state_dir)
        server = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli", "serve", "--state-dir", str(Path(state_dir) / "server"),
             "--port", str(port), "--slots", "cpu:2", "--run-as", "server-user"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{url}/status", timeout=1).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("the server did not start")
                    time.sleep(0.2)
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "import apportion": [sys.executable, "-c", "import apportion"],
                "apportion status": [sys.executable, "-m", "apportion.cli", "status"],
                "apportion queue": [sys.executable, "-m", "apportion.cli", "queue"],
                "apportion --help": [sys.executable, "-m", "apportion.cli", "--help"],
                "apportion simulate --help": [sys.executable, "-m", "apportion.cli", "simulate", "--help"],
            }
            if args.quick:
                commands = {name: commands[name] for name in ("python -c pass", "apportion status")}
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.repeats):  # interleaved, so that load on the machine hits all alike
                for name, argv in commands.items():
                    times[name].append(wall_s(argv, env))
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(json.dumps({
        "repeats": args.repeats,
        "median_s": {name: round(statistics.median(values), 3) for name, values in times.items()},
        "min_s": {name: round(min(values), 3) for name, values in times.items()},
    }))


if __name__ == "__main__":
    main()
