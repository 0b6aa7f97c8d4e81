"""Assemble and run ``apportion serve``: state lock, store, executor, scheduler thread, HTTP server."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from apportion.executors.local import LocalExecutor
from apportion.workloads.catalog import builtin_throughputs
from apportion.policies.base import Policy
from apportion.serve.scheduler import Scheduler, ServeConfig
from apportion.serve.slots import Slot
from apportion.serve.state import StateStore


class ServerError(Exception):
    """Why the server cannot start, in one line."""


@dataclass(frozen=True)
class ServerOptions:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8642
    token: str | None = None
    round_s: float = 180.0
    grace_s: float = 30.0
    max_retries: int = 3
    prices: dict[str, float] | None = None  # $ per GPU-hour of each slot type
    checkpoint_every: str | None = None  # jobs' periodic checkpoints unless their file says; None: auto


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lock_state_dir(state_dir: Path):
    """Hold an exclusive lock on STATE_DIR/server.lock for this process's life (released even on SIGKILL)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = open(state_dir / "server.lock", "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        other = handle.read().strip() or "?"
        handle.close()
        raise ServerError(f"another apportion server (pid {other}) is using {state_dir}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ServerError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def server_url(host: str, port: int) -> str:
    """The URL jobs on this machine use to reach the server."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(options: ServerOptions, slots: list[Slot], policy: Policy, log: Callable[[str], None],
          ready: Callable[[Scheduler], None] | None = None) -> None:
    """Run until SIGINT/SIGTERM. Jobs keep running when the server stops; the next one adopts them."""
    import uvicorn

    from apportion.serve.api import create_app

    if not is_loopback(options.host) and not options.token:
        raise ServerError(f"--host {options.host} is not loopback: set --token so that only callers with it get in")
    state_dir = Path(os.path.realpath(options.state_dir))
    lock = lock_state_dir(state_dir)
    sock = listen(options.host, options.port)
    port = sock.getsockname()[1]
    store = StateStore(state_dir / "state.db")
    config = ServeConfig(
        state_dir=state_dir, server_url=server_url(options.host, port), round_s=options.round_s,
        grace_s=options.grace_s, max_retries=options.max_retries, token=options.token, prices=dict(options.prices or {}),
        checkpoint_every=options.checkpoint_every,
    )
    scheduler = Scheduler(store, LocalExecutor(state_dir), slots, policy, config, log=log,
                          throughputs=builtin_throughputs())
    found = scheduler.recover()
    if found["adopted"] or found["ended"] or found["strays"]:
        log(f"recovered: adopted jobs {found['adopted'] or '-'}, ended while down {found['ended'] or '-'}, "
            f"strays killed {found['strays'] or '-'}")
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,), name="apportion-scheduler", daemon=True)
    loop.start()
    if ready is not None:
        ready(scheduler)
    app = create_app(scheduler, options.token)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        loop.join(timeout=10)
        store.close()
        lock.close()
