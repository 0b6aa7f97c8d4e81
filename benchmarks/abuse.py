"""A real ``apportion serve`` tried as a hostile client would: prints what a real user sees.

Starts ``apportion serve`` (the ``apportion`` that ``PYTHONPATH`` names, so two trees compare)
on a free loopback port with a temporary state directory and one user, then:

- the user's ``GET /status`` latency (p50/p99), alone and while 20 concurrent clients (one
  separate process, so their work does not slow this one's timer) send random well-formed user
  credentials for ``--flood-s`` seconds; the flood's request rate and its answers by code;
- the server's peak memory (VmHWM from /proc/PID/status) before the flood, after it, and after
  one unauthenticated 200 MB ``POST /jobs`` (streamed from one reused 1 MiB buffer) with a
  ``Content-Length`` and then one chunked (no length).

It ends only the server it started, by pid. Targets: p99 <= 50 ms under the flood, peak memory
<= 150 MB. The last line is the figures as one JSON object.

    python benchmarks/abuse.py                            # this tree's code
    PYTHONPATH=/some/other/tree python benchmarks/abuse.py  # another's, as the baseline
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

BIG_BODY = 200 * 2**20
CHUNK = b" " * 2**20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(conn: http.client.HTTPConnection, path: str, credential: str) -> int:
    conn.request("GET", path, headers={"Authorization": f"Bearer {credential}"})
    answer = conn.getresponse()
    answer.read()
    return answer.status


def latencies(port: int, credential: str, seconds: float, most: int = 100_000) -> list[float]:
    """Milliseconds of each ``GET /status`` of one user, one after another, for ``seconds``: each on
    a new connection, as ``apportion status`` makes them."""
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(times) < most:
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        status = get(conn, "/status", credential)
        conn.close()
        times.append((time.perf_counter() - start) * 1000)
        if status != 200:
            raise SystemExit(f"the real user got {status} from /status")
        time.sleep(0.01)  # a person's client polling, not a second flood
    return times


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"requests": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1)}


def flood(port: int, clients: int, seconds: float) -> dict:
    """``clients`` threads sending random well-formed user credentials for ``seconds``."""
    codes: Counter = Counter()
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def one() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: Counter = Counter()
        while time.monotonic() < end:
            try:
                mine[get(conn, "/status", f"u1.{secrets.token_hex(32)}")] += 1
            except (OSError, http.client.HTTPException):
                mine["error"] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()
        with lock:
            codes.update(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    return {"requests": sum(codes.values()), "per_s": round(sum(codes.values()) / took),
            "codes": {str(k): v for k, v in sorted(codes.items(), key=str)}}


def big_post(port: int, chunked: bool) -> dict:
    """One unauthenticated 200 MB POST /jobs: its answer, and how much of it was sent before it came."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest("POST", "/jobs")
    conn.putheader("Content-Type", "application/json")
    conn.putheader(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(BIG_BODY))))
    conn.endheaders()
    sent = 0
    started = time.monotonic()
    try:
        while sent < BIG_BODY:
            conn.send(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK)
            sent += len(CHUNK)
        if chunked:
            conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed: the rest is not read
    try:
        answer = conn.getresponse()
        status, detail = answer.status, answer.read()[:120].decode(errors="replace")
    except (OSError, http.client.HTTPException) as err:
        status, detail = "closed", str(err)
    conn.close()
    return {"status": status, "sent_mb": round(sent / 2**20), "s": round(time.monotonic() - started, 2),
            "detail": detail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--flood-s", type=float, default=10.0)
    parser.add_argument("--flood-only", type=int, help=argparse.SUPPRESS)  # the flood's own process: the port
    args = parser.parse_args()
    if args.flood_only:
        print(json.dumps(flood(args.flood_only, args.clients, args.flood_s)))
        return

    with tempfile.TemporaryDirectory(prefix="apportion-abuse-") as tmp:
        state = Path(tmp) / "state"
        apportion = [sys.executable, "-m", "apportion.cli"]
        added = subprocess.run([*apportion, "users", "add", "alice", "--state-dir", str(state)], capture_output=True,
                               text=True, check=True, cwd=tmp)  # not the current directory: PYTHONPATH's apportion
        credential = added.stdout.strip()
        port = free_port()
        log = open(Path(tmp) / "server.log", "w")
        server = subprocess.Popen([*apportion, "serve", "--state-dir", str(state), "--port", str(port), "--slots",
                                   "cpu:1", "--policy", "fifo", "--run-as", "server-user", "--no-warm-start"],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/status", credential) == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start: " + (Path(tmp) / "server.log").read_text()[-2000:])
                time.sleep(0.2)
            figures: dict = {"code": os.environ.get("PYTHONPATH", "(installed)")}
            figures["alone"] = summary(latencies(port, credential, 3.0))
            figures["peak_mb_before"] = round(peak_rss_mb(server.pid))
            flooding = subprocess.Popen([sys.executable, __file__, "--flood-only", str(port), "--clients",
                                         str(args.clients), "--flood-s", str(args.flood_s)], stdout=subprocess.PIPE,
                                        text=True)
            time.sleep(0.5)  # the flood under way
            figures["under_flood"] = summary(latencies(port, credential, args.flood_s - 1.0))
            out, _ = flooding.communicate(timeout=args.flood_s + 60)
            figures["flood"] = json.loads(out)
            figures["after_flood"] = summary(latencies(port, credential, 2.0))
            figures["peak_mb_after_flood"] = round(peak_rss_mb(server.pid))
            figures["post_200mb"] = big_post(port, chunked=False)
            figures["peak_mb_after_post"] = round(peak_rss_mb(server.pid))
            figures["post_200mb_chunked"] = big_post(port, chunked=True)
            figures["peak_mb_after_chunked"] = round(peak_rss_mb(server.pid))
            figures["still_answers"] = get(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "/status",
                                           credential)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()

    print(f"code: {figures['code']}")
    print(f"alone:       /status p50 {figures['alone']['p50_ms']} ms, p99 {figures['alone']['p99_ms']} ms")
    print(f"under flood: /status p50 {figures['under_flood']['p50_ms']} ms, p99 {figures['under_flood']['p99_ms']} ms "
          f"(target p99 <= 50 ms); flood {figures['flood']['per_s']} requests/s, answers {figures['flood']['codes']}")
    print(f"after flood: /status p50 {figures['after_flood']['p50_ms']} ms, p99 {figures['after_flood']['p99_ms']} ms")
    print(f"peak memory: {figures['peak_mb_before']} MB before, {figures['peak_mb_after_flood']} MB after the flood, "
          f"{figures['peak_mb_after_post']} MB after a 200 MB POST (answer {figures['post_200mb']['status']}), "
          f"{figures['peak_mb_after_chunked']} MB after a chunked one (answer "
          f"{figures['post_200mb_chunked']['status']}) (target <= 150 MB)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
