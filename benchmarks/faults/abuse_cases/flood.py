"""A credential flood and oversized bodies: one user's ``GET /status`` latency while 20 clients send
random well-formed credentials, and the server's peak memory after unauthenticated 200 MB POSTs."""

from __future__ import annotations

import http.client
import json
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from abuse_server import Server, peak_rss_mb, percentile, row

NAME = "flood"
ABOUT = "random credentials from 20 clients; 200 MB bodies with and without a length"
BIG_BODY = 200 * 2**20
CHUNK = b" " * 2**20


def latencies(server: Server, seconds: float, most: int = 100_000) -> list[float]:
    """Milliseconds of each ``GET /status`` of one user, one after another, each on a new connection."""
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(times) < most:
        answer = server.request("GET", "/status", user="alice", timeout=30)
        if answer.status != 200:
            raise SystemExit(f"the real user got {answer.status} from /status")
        times.append(answer.seconds * 1000)
        time.sleep(0.01)  # a person's client polling, not a second flood
    return times


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
                conn.request("GET", "/status", headers={"Authorization": f"Bearer u1.{secrets.token_hex(32)}"})
                answer = conn.getresponse()
                answer.read()
                mine[answer.status] += 1
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


def big_post(port: int, chunked: bool) -> object:
    """One unauthenticated 200 MB POST /jobs; its answer's status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest("POST", "/jobs")
    conn.putheader("Content-Type", "application/json")
    conn.putheader(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(BIG_BODY))))
    conn.endheaders()
    sent = 0
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
        answer.read()
        status: object = answer.status
    except (OSError, http.client.HTTPException):
        status = "closed"
    conn.close()
    return status


def run(args) -> list[dict]:
    with Server(users=("alice",), args=("--policy", "fifo")) as server:
        alone = latencies(server, 3.0)
        flooding = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "abuse.py"), "--flood-only",
                                     str(server.port), "--clients", str(args.clients), "--flood-s",
                                     str(args.flood_s)], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)  # the flood under way
        under = latencies(server, args.flood_s - 1.0)
        out, _ = flooding.communicate(timeout=args.flood_s + 60)
        rate = json.loads(out)
        big_post(server.port, chunked=False)
        big_post(server.port, chunked=True)
        peak = peak_rss_mb(server.pid)
        still = server.request("GET", "/status", user="alice").status
    return [row(NAME, "/status p50 alone", round(statistics.median(alone), 1), None, "ms"),
            row(NAME, f"/status p99 under {rate['per_s']} bad credentials/s", round(percentile(under, 0.99), 1),
                50, "ms"),
            row(NAME, "peak memory after 200 MB POSTs", round(peak), 150, "MB"),
            row(NAME, "/status answers afterwards", still, 200, "status", meets="equal")]
