"""Assemble and run ``apportion serve``: state lock, store, executor, scheduler thread, HTTP server."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from apportion.executors.base import Executor
from apportion.executors.local import LocalExecutor
from apportion.workloads.catalog import builtin_throughputs
from apportion.policies.base import Policy
from apportion.serve.accounts.auth import check_secret, reserved, reserved_reason
from apportion.serve.base.bounds import MAX_BODY
from apportion.serve.base.loopback import is_loopback
from apportion.serve.accounts.budgets import BudgetRules
from apportion.serve.notify.notifier import Notifier
from apportion.serve.jobs.notify_hosts import NotifyHosts
from apportion.serve.base.private import private_dir, tighten
from apportion.serve.resources.registry import config_from as resource_config, with_settings
from apportion.serve.accounts.runas import RunAs, mapped_accounts, start_warnings
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import Node, Slot
from apportion.serve.base.space import NoSpace
from apportion.serve.app.startup import ServerError, listen
from apportion.serve.store.state import StateStore


@dataclass(frozen=True)
class ServerOptions:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8642
    token: str | None = None  # the admin token (auth.py): its bearer is an admin
    run_as: RunAs = field(default_factory=RunAs)  # which OS account jobs run as (runas.py)
    round_s: float = 180.0
    grace_s: float = 30.0
    max_retries: int = 3
    hung_after_s: float | None = 900.0  # an attempt silent this long is stopped and retried (None: never)
    retry_backoff_s: float = 0.0  # a crash's retry waits this × 2^(k-1), capped (lifecycle.retry_delay_s)
    prices: dict[str, float] | None = None  # $ per GPU-hour of each slot type
    checkpoint_every: str | None = None  # jobs' periodic checkpoints unless their file says; None: auto
    shared_dir: Path | None = None  # jobs' default checkpoint directories live here, if not in state_dir (Ray)
    job_host: str | None = None  # the address jobs reach the server at, when not --host's (other Ray nodes)
    policy_options: dict | None = None  # what the policy was built with, as JSON (recorded for a replay)
    warm_start: bool = True  # the local executor keeps warm wrappers for Python jobs (executors/local/warm_start.py)
    received_since: str = "allocation"  # the received share's rule (mechanism/received.py)
    share_by_user: bool = True  # the cluster divided among users first (policies/by_user.py)
    user_weights: dict[str, float] | None = None  # user -> weight of its share (a user not named: 1)
    max_body: int = MAX_BODY  # bytes of a request body read at most (edge.py)
    notify_hosts: NotifyHosts = field(default_factory=NotifyHosts)  # where jobs' notify URLs may go (notify_hosts.py)
    node: Node | None = None  # the cores and memory the slots' jobs share; None: this machine's
    budgets: BudgetRules = field(default_factory=BudgetRules)  # each user's budgets (budgets.py)


ServerOptions = with_settings(ServerOptions, "config")  # and what each optional resource adds (resources/registry.py)


def lock_state_dir(state_dir: Path):
    """Hold an exclusive lock on STATE_DIR/server.lock for this process's life (released even on SIGKILL)."""
    private_dir(state_dir)
    handle = os.fdopen(os.open(state_dir / "server.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600),
                       "a+")
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


def server_url(host: str, port: int) -> str:
    """The URL jobs on this machine use to reach the server."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _has_users(path: Path) -> bool:
    """Does the state file at ``path`` hold users? ServerError when a working one has a reserved name."""
    if not path.exists():
        return False
    store = StateStore(path)
    try:
        for user in store.users():
            if user.revoked is None and reserved(user.name):
                raise ServerError(f"{reserved_reason(user.name)}: apportion users revoke {user.name} "
                                  f"--state-dir {path.parent}, then add the user under another name")
        return store.has_users()
    finally:
        store.close()


def check_credentials(options: ServerOptions, has_users: bool) -> None:
    """ServerError unless the server's credentials fit its address and run-as mode.

    An open server (no user in the state file, no admin token) trusts the user a request
    names, which is only tolerable on loopback and never when jobs run as that user's account.
    """
    if options.token is not None:
        try:
            check_secret(options.token, "the admin token")
        except ValueError as exc:
            raise ServerError(str(exc)) from None
    if has_users or options.token:
        return
    if not is_loopback(options.host):
        raise ServerError(f"--host {options.host} is not loopback: add users first (apportion users add NAME "
                          "--state-dir ...) or give --token-file, so that only callers with a credential get in")
    if options.run_as.mode == "mapped":
        raise ServerError("--run-as mapped runs each job as its user's OS account, so users must prove who they are:"
                          " add them first (apportion users add NAME --state-dir ...)")


def serve(options: ServerOptions, slots: list[Slot], policy: Policy, log: Callable[[str], None],
          ready: Callable[[Scheduler], None] | None = None, executor: Executor | None = None,
          sock: socket.socket | None = None, **given) -> None:
    """Run until SIGINT/SIGTERM. Jobs keep running when the server stops; the next one adopts them.

    ``executor``: where attempts run (default: this machine's processes, ``LocalExecutor``);
    ``sock``: the socket already listening on ``options``' address (``startup.listen``), if taken;
    ``given``: what the optional resources are started with, each taking its own (``Resource.given``: what
    rents the cluster's nodes; default none, an owned cluster)."""
    import uvicorn

    from apportion.serve.http.api import create_app
    from apportion.serve.http.dashboard import keep_sampling, sample_every_s
    from apportion.serve.views.history import History

    state_dir = Path(os.path.realpath(options.state_dir))
    check_credentials(options, _has_users(state_dir / "state.db"))  # before anything is created
    if options.run_as.mode == "mapped":  # an account missing or root: said now, not at a user's first submit
        try:
            mapped_accounts(options.run_as)
        except ValueError as exc:
            raise ServerError(str(exc)) from None
    lock = lock_state_dir(state_dir)
    sock = sock or listen(options.host, options.port)
    port = sock.getsockname()[1]
    store = StateStore(state_dir / "state.db")
    # owner-only, but for mapped accounts traversable down to each job's directory (runas.py)
    tighten(state_dir, 0o711 if options.run_as.mode == "mapped" else 0o700)
    if options.run_as.mode == "mapped":  # what would fail every job of an account, or weaken its isolation
        for warning in start_warnings(options.run_as, state_dir, sys.executable):
            log(f"warning: {warning}")
    config = ServeConfig(
        state_dir=state_dir, server_url=server_url(options.job_host or options.host, port), round_s=options.round_s,
        grace_s=options.grace_s, max_retries=options.max_retries, hung_after_s=options.hung_after_s,
        retry_backoff_s=options.retry_backoff_s,
        token=options.token, run_as=options.run_as,
        prices=dict(options.prices or {}), checkpoint_every=options.checkpoint_every, shared_dir=options.shared_dir,
        policy_options=dict(options.policy_options or {}), received_since=options.received_since,
        share_by_user=options.share_by_user, user_weights=dict(options.user_weights or {}),
        notify_hosts=options.notify_hosts, node=options.node, budgets=options.budgets,
        **resource_config(options),
    )
    spares = min(len(slots), 2) if options.warm_start else 0  # warm wrappers kept ready (executors/local/spare_pool.py)
    executor = executor or LocalExecutor(state_dir, spares=spares)
    try:
        scheduler = Scheduler(store, executor, slots, policy, config, log=log, throughputs=builtin_throughputs(),
                              **given)
        found = scheduler.recover()
    except NoSpace as exc:  # a server that cannot record what it finds does not start
        store.close()
        lock.close()
        sock.close()
        raise ServerError(str(exc)) from None
    if found["adopted"] or found["ended"] or found["strays"]:
        log(f"recovered: adopted jobs {found['adopted'] or '-'}, ended while down {found['ended'] or '-'}, "
            f"strays killed {found['strays'] or '-'}")
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,), name="apportion-scheduler", daemon=True)
    loop.start()
    Notifier(store, scheduler.lock, options.notify_hosts, config.server_url, log=log).start(stop)
    history = History(store=store)  # the dashboard's charts over time, kept in the state file
    threading.Thread(target=keep_sampling, args=(scheduler, history, stop, sample_every_s(options.round_s)),
                     name="apportion-dashboard", daemon=True).start()
    if ready is not None:
        ready(scheduler)
    app = create_app(scheduler, options.token, history, max_body=options.max_body)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    # uvicorn shuts down on SIGTERM, then raises it again under the handler found before it: the
    # default one would end the process before the clean-up below
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _exit_terminated) if main_thread else None
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        loop.join(timeout=10)
        if not loop.is_alive():  # the scheduler thread no longer starts spares
            executor.close()
        store.close()
        lock.close()
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _exit_terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)
