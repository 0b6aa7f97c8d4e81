"""`apportion serve`: the real scheduler on this machine, with the policies of the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.output import console, errors, escape, fail


def serve(
    ctx: typer.Context,
    state_dir: Path = typer.Option(Path("~/.apportion/server"), "--state-dir", help="Where the state file, logs and default checkpoints live.", rich_help_panel="Server"),
    port: int = typer.Option(8642, "--port", help="HTTP port (0: any free port).", rich_help_panel="Server"),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback requires --token.", rich_help_panel="Server"),
    token: Optional[str] = typer.Option(None, "--token", help="An admin token (deprecated: other users see it in ps; use --token-file).", rich_help_panel="Security"),
    token_file: Optional[Path] = typer.Option(None, "--token-file", help="A file holding an admin token: its bearer may act as any user (people get their own with `apportion users add`).", rich_help_panel="Security"),
    run_as: Optional[str] = typer.Option(None, "--run-as", help="Which OS account runs jobs: server-user (default unless root), mapped (with --user-map; root only), refuse (default as root: do not start).", rich_help_panel="Security"),
    user_map: Optional[Path] = typer.Option(None, "--user-map", help="--run-as mapped: YAML or JSON mapping each apportion user to an OS account.", rich_help_panel="Security"),
    slots: Optional[str] = typer.Option(None, "--slots", help="TYPE:COUNT,... e.g. cpu:2 or h100:4 (default: this machine's GPUs, else cpu:1).", rich_help_panel="Executor"),
    policy: str = typer.Option("las", "--policy", "-p", help=f"One of: {opt.POLICY_NAMES} (NAME:agnostic and NAME:space-sharing as in simulate).", rich_help_panel="Policy options"),
    round_s: float = opt.round_option(180.0, "Round length in seconds of wall time.", panel="Policy options"),
    max_retries: int = typer.Option(3, "--max-retries", help="Crashes retried from the last checkpoint before a job is marked failed.", rich_help_panel="Jobs"),
    hung_after_s: float = typer.Option(900.0, "--hung-after-s", help="Seconds without a lease call or progress report after which an attempt is hung: stopped, and retried from its checkpoint (counts against --max-retries); a job file's hung_after_s overrides it; 0: never.", rich_help_panel="Jobs"),
    grace_s: float = typer.Option(30.0, "--grace-s", help="Seconds a job may overrun its lease before SIGTERM, and then SIGTERM before SIGKILL.", rich_help_panel="Jobs"),
    checkpoint_every: Optional[str] = typer.Option(None, "--checkpoint-every", help="Jobs' periodic checkpoints unless their file says: auto (CheckFreq: <= 5% overhead, <= 300 s lost; the default), auto:SECONDS (that bound), off, or SECONDS.", rich_help_panel="Jobs"),
    executor: str = typer.Option("local", "--executor", help="Where jobs run: local (this machine's processes) or ray (a Ray cluster's nodes: docs/ray.md).", rich_help_panel="Executor"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="--executor ray: the cluster's address (default: the cluster file's, else RAY_ADDRESS, else the one started on this machine).", rich_help_panel="Executor"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="--executor ray: a cluster file whose ray: section names each GPU type's Ray resource and the directory every node shares.", rich_help_panel="Executor"),
    notify_hosts: Optional[str] = typer.Option(None, "--notify-hosts", help="Where jobs' notify: URLs may point: comma-separated host names, *.domain, addresses and networks (e.g. hooks.example.com,10.0.0.0/8), or none; default any but link-local, loopback, multicast and reserved addresses.", rich_help_panel="Security"),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help="Fork Python jobs (python SCRIPT or -m MODULE) from a wrapper that has imported torch already, unless their file says warm_start: false (local executor).", rich_help_panel="Jobs"),
) -> None:
    """Run the scheduler: start, preempt and resume the jobs submitted to it, on this machine or a Ray cluster."""
    from apportion.serve.bounds import MAX_HUNG_AFTER_S, MIN_HUNG_AFTER_S

    if round_s <= 0:
        raise fail(f"--round-s must be positive, got {round_s}")
    if max_retries < 0:
        raise fail(f"--max-retries must be >= 0, got {max_retries}")
    if hung_after_s != 0 and not MIN_HUNG_AFTER_S <= hung_after_s <= MAX_HUNG_AFTER_S:
        raise fail(f"--hung-after-s must be 0 (never) or from {MIN_HUNG_AFTER_S:g} to {MAX_HUNG_AFTER_S:g} seconds,"
                   f" got {hung_after_s:g}")
    if grace_s < 0:
        raise fail(f"--grace-s must be >= 0, got {grace_s}")
    if checkpoint_every is not None:
        from apportion.runtime.cadence import CheckpointEvery

        try:
            checkpoint_every = str(CheckpointEvery.parse(checkpoint_every, source="--checkpoint-every"))
        except ValueError as exc:
            raise fail(str(exc)) from None
    if not 0 <= port <= 65535:
        raise fail(f"--port must be 0-65535, got {port}")
    if executor not in ("local", "ray"):
        raise fail(f"--executor must be local or ray, got {executor!r}")
    if executor == "local" and (ray_address is not None or cluster is not None):
        raise fail(f"{'--ray-address' if ray_address is not None else '--cluster'} needs --executor ray")
    from apportion.core.errors import InputError
    from apportion.serve.notify_hosts import NotifyHosts

    try:
        notify_rule = NotifyHosts.parse(notify_hosts)
    except InputError as exc:
        raise fail(str(exc)) from None
    sock = _take_port(host, port)  # a busy port is said at once, before the imports below take seconds

    import numpy as np

    from apportion.experiment import check_policy_specs, policy_from_spec
    from apportion.perf.accelerators import list_prices
    from apportion.serve.scheduler import check_policy
    from apportion.serve.server import ServerError, ServerOptions, is_loopback
    from apportion.serve.server import serve as run_server
    from apportion.serve.slots import describe, detect_gpus, parse_slots

    backend = None
    if executor == "ray":
        if slots is not None:
            raise fail("--slots: on Ray the slots are the cluster's GPUs; declare their types in --cluster FILE (docs/ray.md)")
        if run_as == "mapped":
            raise fail("--run-as mapped: on Ray, jobs run as the OS user of the Ray workers; it needs --executor local")
        backend = _ray_backend(state_dir, ray_address, cluster)
        offered, no_gpus = backend.slots, False
    else:
        gpus = detect_gpus()
        try:
            offered = parse_slots(slots, gpus) if slots else gpus
        except InputError as exc:
            raise fail(str(exc)) from None
        no_gpus = not offered
        if no_gpus:
            offered = parse_slots("cpu:1")
    policy_options = opt.policy_options(ctx)
    queue_config = policy_options.get("queues")
    prices = list_prices({s.gpu_type for s in offered})
    if backend is not None:
        prices.update(backend.prices)

    try:
        check_policy_specs([policy], **policy_options)
        if queue_config is not None:
            types = list(dict.fromkeys(s.gpu_type for s in offered))
            queue_config.check_cluster(tuple(types), np.array([sum(s.gpu_type == t for s in offered) for t in types]))
        check_policy(policy_from_spec(policy, **policy_options), offered, prices)
        chosen_policy = policy_from_spec(policy, **policy_options)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    admin_token, run_as_setting = _credentials(token, token_file, run_as, user_map)
    options = ServerOptions(state_dir=state_dir.expanduser(), host=host, port=port, token=admin_token,
                            run_as=run_as_setting, round_s=round_s, grace_s=grace_s, max_retries=max_retries,
                            hung_after_s=hung_after_s or None,
                            prices=prices, checkpoint_every=checkpoint_every, warm_start=warm_start,
                            shared_dir=backend.shared_dir if backend is not None else None,
                            job_host=_job_host(host) if backend is not None else None,
                            policy_options=opt.recorded_policy_options(ctx), notify_hosts=notify_rule)

    def log(message: str) -> None:  # messages carry job names and log lines: text, never markup
        console.print(f"[dim]{_clock()}[/] {escape(message)}", highlight=False, soft_wrap=True)

    def ready(scheduler) -> None:
        log(f"apportion serve on {scheduler.config.server_url}: slots {describe(scheduler.slots)}, policy "
            f"{chosen_policy.name}, rounds of {round_s:g} s, state in {scheduler.config.state_dir}")
        log(f"dashboard: {scheduler.config.server_url}/")
        if backend is not None:
            log(f"on Ray: slots per node {backend.describe()}; checkpoints and logs in {backend.shared_dir}")
            if is_loopback(host) and backend.remote_nodes:
                log(f"note: --host {host} is reachable from this machine only: jobs on the {backend.remote_nodes}"
                    " other machine(s) need --host 0.0.0.0 (with credentials: docs/ray.md)")
        if admin_token or scheduler.store.has_users():
            active = sum(u.revoked is None for u in scheduler.store.users())
            runs_as = "their users' OS accounts" if run_as_setting.mode == "mapped" else "this server's OS user"
            log(f"credentials required: {active} user(s){', and an admin token' if admin_token else ''}; "
                f"jobs run as {runs_as}")
        else:
            log("open: no credentials, a caller is who it says it is (apportion users add NAME to change that)")

    if no_gpus:
        errors.print("no GPUs found: offering 1 CPU slot (--slots cpu:N for more)", highlight=False)
    try:
        run_server(options, offered, chosen_policy, log, ready, backend.executor if backend is not None else None,
                   sock=sock)
    except ServerError as exc:
        raise fail(str(exc)) from None


def _take_port(host: str, port: int):
    """A socket listening on ``host:port``; a one-line error when the port is taken."""
    from apportion.serve.startup import ServerError, listen

    try:
        return listen(host, port)
    except ServerError as exc:
        raise fail(str(exc)) from None


def _ray_backend(state_dir: Path, address: Optional[str], cluster: Optional[Path]):
    """The Ray cluster's slots and executor (one-line errors)."""
    from apportion.core.errors import InputError
    from apportion.serve.on_ray import RayUnavailable, ray_backend
    from apportion.workloads.cluster_file import load_ray_settings

    try:
        settings = load_ray_settings(cluster) if cluster is not None else None
        return ray_backend(state_dir.expanduser(), address, settings)
    except (InputError, RayUnavailable) as exc:
        raise fail(str(exc)) from None


def _job_host(host: str) -> str | None:
    """The address jobs on Ray nodes reach a server bound to ``host`` at (this machine's, for 0.0.0.0)."""
    if host in ("0.0.0.0", "::", ""):
        import ray

        return ray.util.get_node_ip_address()
    return None


def _credentials(token: Optional[str], token_file: Optional[Path], run_as: Optional[str], user_map: Optional[Path]):
    """The admin token (from --token-file, or the deprecated --token) and the run-as setting; one-line errors."""
    import os

    from apportion.serve.auth import check_secret, read_secret_file
    from apportion.serve.runas import choose, load_user_map

    if token is not None and token_file is not None:
        raise fail("give --token-file or --token, not both")
    try:
        if token is not None:
            admin_token = check_secret(token, "--token")
            errors.print("warning: --token is visible to every user of this machine (ps, /proc); "
                         "use --token-file", highlight=False)
        elif token_file is not None:
            admin_token = read_secret_file(token_file, f"--token-file {token_file}")
        else:
            admin_token = None
        mapping = load_user_map(user_map) if user_map is not None else None
        return admin_token, choose(run_as, os.geteuid(), mapping)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _clock(when: Optional[float] = None) -> str:
    import time as _time

    return _time.strftime("%H:%M:%S", _time.localtime(when))
