"""`apportion serve`: the real scheduler on this machine, with the policies of the simulator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from apportion.cli import options as opt
from apportion.cli.output import console, errors, escape, fail
from apportion.serve.app.settings import DEFAULTS

if TYPE_CHECKING:
    from apportion.serve.app.settings import ServeSettings
    from apportion.serve.app.settings_file import SettingsFile


def serve(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(None, "--config", help="A YAML file of these settings, each a flag without dashes (round_s: 60); flags given override it."),
    print_config: bool = typer.Option(False, "--print-config", help="Print the settings in effect as such a file, and exit."),
    state_dir: Path = typer.Option(DEFAULTS.state_dir, "--state-dir", help="Where the state file, logs and default checkpoints live.", rich_help_panel="Server"),
    port: int = typer.Option(DEFAULTS.port, "--port", help="HTTP port (0: any free port).", rich_help_panel="Server"),
    host: str = typer.Option(DEFAULTS.host, "--host", help="Address to bind; anything but loopback needs credentials.", rich_help_panel="Server"),
    token: Optional[str] = typer.Option(None, "--token", help="An admin token (others see it in ps: use --token-file).", rich_help_panel="Security"),
    token_file: Optional[Path] = typer.Option(None, "--token-file", help="A file holding an admin token, whose bearer may act as any user.", rich_help_panel="Security"),
    run_as: Optional[str] = typer.Option(None, "--run-as", help="Jobs' OS account: server-user, mapped (with --user-map) or refuse (default as root: do not start).", rich_help_panel="Security"),
    user_map: Optional[Path] = typer.Option(None, "--user-map", help="--run-as mapped: a YAML/JSON file of apportion user: OS account.", rich_help_panel="Security"),
    job_path: str = typer.Option(DEFAULTS.job_path, "--job-path", help="--run-as mapped: the PATH jobs start with (their environment starts clean).", rich_help_panel="Security"),
    slots: Optional[str] = typer.Option(None, "--slots", help="TYPE:COUNT,..: cpu:2, h100:4 (default: the GPUs here, else cpu:1); cores:N, memory_gb:X.", rich_help_panel="Executor"),
    cpu_split: str = typer.Option(DEFAULTS.cpu_split, "--cpu-split", show_default=False, help="CPU cores per job: off (default), proportional or aware.", rich_help_panel="Executor"),
    policy: str = typer.Option(DEFAULTS.policy, "--policy", "-p", help=f"One of: {opt.POLICY_NAMES}; NAME:agnostic, NAME:space-sharing.", rich_help_panel="Policy options"),
    round_s: float = opt.round_option(DEFAULTS.round_s, "Round length in seconds.", panel="Policy options"),
    received_since: str = typer.Option(DEFAULTS.received_since, "--received-since", help="Received share counted from: allocation (Gavel's) or arrival.", rich_help_panel="Policy options"),
    share_by_user: bool = typer.Option(DEFAULTS.share_by_user, "--share-by-user/--no-share-by-user", show_default=False, help="Share the slots by user first (default).", rich_help_panel="Jobs"),
    user_weights: Optional[str] = typer.Option(None, "--user-weights", help="Users' shares: alice=2,bob=1 (others 1).", rich_help_panel="Jobs"),
    max_retries: int = typer.Option(DEFAULTS.max_retries, "--max-retries", help="Crashes retried from a checkpoint before a job fails.", rich_help_panel="Jobs"),
    retry_backoff_s: float = typer.Option(DEFAULTS.retry_backoff_s, "--retry-backoff-s", help="Seconds a crashed job waits before its first retry, doubling each retry (at most 10 min); 0: at once.", rich_help_panel="Jobs"),
    hung_after_s: float = typer.Option(DEFAULTS.hung_after_s, "--hung-after-s", help="Seconds of silence after which an attempt is hung and retried; 0: never.", rich_help_panel="Jobs"),
    grace_s: float = typer.Option(DEFAULTS.grace_s, "--grace-s", help="Seconds a job may overrun its lease before SIGTERM, then SIGKILL.", rich_help_panel="Jobs"),
    checkpoint_every: Optional[str] = typer.Option(None, "--checkpoint-every", help="auto (the default: <= 5% overhead), auto:SECONDS, off, or SECONDS.", rich_help_panel="Jobs"),
    executor: str = typer.Option(DEFAULTS.executor, "--executor", help="local, ray (docs/ray.md), slurm (docs/slurm.md) or a plugin (docs/policies.md).", rich_help_panel="Executor"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="--executor ray: its address (default: --cluster's, else RAY_ADDRESS, else this machine's).", rich_help_panel="Executor"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="--executor ray: a cluster file (types' Ray resources, shared dir).", rich_help_panel="Executor"),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="--executor slurm: the partition apportion manages (default: Slurm's default).", rich_help_panel="Executor"),
    slurm_account: Optional[str] = typer.Option(None, "--slurm-account", help="--executor slurm: the Slurm account jobs are charged to (under --run-as mapped: each user's own).", rich_help_panel="Executor"),
    market: Optional[list[str]] = typer.Option(None, "--market", metavar="<path>", help="Rent the nodes from a market: FILE, DIR (repeatable) or synthetic (docs/cloud.md).", rich_help_panel="Executor"),
    provisioning: str = typer.Option(DEFAULTS.provisioning, "--provisioning", help="With --market: what to rent (as simulate's).", rich_help_panel="Executor"),
    notify_hosts: Optional[str] = typer.Option(None, "--notify-hosts", help="Hosts, *.domain or networks notify: URLs may reach (none: off).", rich_help_panel="Security"),
    warm_start: bool = typer.Option(DEFAULTS.warm_start, "--warm-start/--no-warm-start", help="Fork Python jobs from a wrapper with torch imported (local executor).", rich_help_panel="Jobs"),
    privacy_policy: str = typer.Option(DEFAULTS.privacy_policy, "--privacy-policy", show_default=False, help="Privacy: fcfs (default), rr, dpf-n, dpf-t, pack, or a plugin.", rich_help_panel="Policy options"),
    privacy_n: Optional[int] = typer.Option(None, "--privacy-n", hidden=True, help="Unlock a block's budget over this many claims for it (dpf-n; rr and pack by claims).", rich_help_panel="Policy options"),
    privacy_t: Optional[float] = typer.Option(None, "--privacy-t", hidden=True, help="Unlock a block's budget over this many seconds from when it was added (dpf-t; rr and pack by time).", rich_help_panel="Policy options"),
    privacy_timeout_s: Optional[float] = typer.Option(None, "--privacy-timeout-s", hidden=True, help="Reject a privacy claim not granted within this many seconds (default: it waits while it can still fit).", rich_help_panel="Policy options"),
    privacy_rejected_portions: str = typer.Option(DEFAULTS.privacy_rejected_portions, "--privacy-rejected-portions", hidden=True, help="Round robin: what a rejected claim held: lost (PrivateKube's; the default) or returned to its blocks.", rich_help_panel="Policy options"),
    max_active_jobs: int = typer.Option(DEFAULTS.max_active_jobs, "--max-active-jobs", show_default=False, help="A user's active jobs, an array's tasks each (50,000).", rich_help_panel="Budgets"),
    max_stored_mb: float = typer.Option(DEFAULTS.max_stored_mb, "--max-stored-mb", show_default=False, help="MB of job specs a user's active jobs store (1,000).", rich_help_panel="Budgets"),
    max_demand_rows: int = typer.Option(DEFAULTS.max_demand_rows, "--max-demand-rows", show_default=False, help="Privacy blocks claimed over a user's active jobs (1,000,000).", rich_help_panel="Budgets"),
    max_after_edges: int = typer.Option(DEFAULTS.max_after_edges, "--max-after-edges", show_default=False, help="Jobs waited for over a user's active jobs (100,000).", rich_help_panel="Budgets"),
    submit_rate: float = typer.Option(DEFAULTS.submit_rate, "--submit-rate", show_default=False, help="A user's submits a second past the burst (20; then 429).", rich_help_panel="Budgets"),
    submit_burst: int = typer.Option(DEFAULTS.submit_burst, "--submit-burst", show_default=False, help="A user's submits at once (200).", rich_help_panel="Budgets"),
) -> None:
    """Run the scheduler: start, preempt and resume the jobs submitted to it, on this machine or a Ray cluster."""
    settings, given = _settings(ctx, config)
    if print_config:
        from apportion.serve.app.settings_file import settings_yaml

        _check_policy_options(settings, given)
        _check_slots(settings, given)
        console.out(settings_yaml(settings), end="", highlight=False)
        return
    sock = _take_port(settings.host, settings.port)  # a busy port is said at once, before the imports below take seconds
    state_dir, host, round_s, policy = settings.state_dir, settings.host, settings.round_s, settings.policy

    import numpy as np

    from apportion.core.errors import InputError
    from apportion.experiment import policy_from_spec
    from apportion.serve.accounts.budgets import rules_from_settings
    from apportion.perf.accelerators import list_prices
    from apportion.serve.scheduler.scheduler import check_policy
    from apportion.serve.jobs.notify_hosts import NotifyHosts
    from apportion.serve.app.server import ServerError, ServerOptions
    from apportion.serve.base.loopback import is_loopback
    from apportion.serve.app.server import serve as run_server
    from apportion.serve.base.slots import Node, describe, detect_gpus, parse_node, parse_slots

    backend = None
    if settings.executor == "ray":
        backend = _ray_backend(state_dir, settings.ray_address, settings.cluster, given, rented=settings.market is not None)
        offered, no_gpus = backend.slots, False
    elif settings.executor == "slurm":
        backend = _slurm_backend(state_dir, settings.slurm_partition, settings.slurm_account)
        offered, no_gpus = backend.slots, False
    else:
        gpus = detect_gpus()
        try:
            offered = parse_slots(settings.slots, gpus) if settings.slots else gpus
        except InputError as exc:
            raise fail(given.blame("slots", exc.message, str(exc))) from None
        no_gpus = not offered
        if no_gpus:
            offered = parse_slots("cpu:1")
    policy_options = _check_policy_options(settings, given)
    queue_config = policy_options.get("queues")
    prices = list_prices({s.gpu_type for s in offered})
    if backend is not None:
        prices.update(backend.prices)

    try:
        if queue_config is not None:
            types = list(dict.fromkeys(s.gpu_type for s in offered))
            queue_config.check_cluster(tuple(types), np.array([sum(s.gpu_type == t for s in offered) for t in types]))
        check_policy(policy_from_spec(policy, **policy_options), offered, prices)
        chosen_policy = policy_from_spec(policy, **policy_options)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    provisioner = _provisioner(settings, given, backend, offered) if settings.market is not None else None
    admin_token, run_as_setting = _credentials(settings, given)
    options = ServerOptions(state_dir=state_dir, host=host, port=settings.port, token=admin_token,
                            run_as=run_as_setting, round_s=round_s, grace_s=settings.grace_s,
                            max_retries=settings.max_retries, hung_after_s=settings.hung_after_s or None,
                            retry_backoff_s=settings.retry_backoff_s,
                            prices=prices, checkpoint_every=settings.checkpoint_every,
                            warm_start=settings.warm_start, received_since=settings.received_since,
                            share_by_user=settings.share_by_user, user_weights=_user_weights(settings),
                            shared_dir=backend.shared_dir if backend is not None else None,
                            job_host=_job_host(host, settings.executor) if backend is not None else None,
                            policy_options=opt.record_policy_options(settings.policy_options),
                            notify_hosts=NotifyHosts.parse(settings.notify_hosts),
                            privacy_policy=settings.privacy_policy, privacy_n=settings.privacy_n,
                            privacy_t_s=settings.privacy_t, privacy_timeout_s=settings.privacy_timeout_s,
                            privacy_rejected_portions=settings.privacy_rejected_portions,
                            node=parse_node(settings.slots) if backend is None else Node((), 0.0),
                            cpu_split=settings.cpu_split, budgets=rules_from_settings(settings))

    def log(message: str) -> None:  # messages carry job names and log lines: text, never markup
        console.print(f"[dim]{_clock()}[/] {escape(message)}", highlight=False, soft_wrap=True)

    def ready(scheduler) -> None:
        log(f"apportion serve on {scheduler.config.server_url}: slots {describe(scheduler.slots)}, policy "
            f"{chosen_policy.name}{_shared(settings, chosen_policy)}, rounds of {round_s:g} s, state in "
            f"{scheduler.config.state_dir}")
        log(f"dashboard: {scheduler.config.server_url}/")
        cores = scheduler.cores.describe()
        if cores["node_cores"] and cores["split"] != "off":
            log(f"CPU cores: {cores['node_cores']}, {cores['split']} split, held by {cores['held_by']}")
        if backend is not None:
            log(f"on {getattr(backend, 'where', 'Ray')}: slots per node {backend.describe()}; checkpoints and logs in"
                f" {backend.shared_dir}")
        if provisioner is not None:
            log(f"rented: at most {describe(scheduler.slots)}, instances from {', '.join(settings.market)} as"
                f" {settings.provisioning} chooses them, asked of Ray's autoscaler")
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
    executor = backend.executor if backend is not None else _plugin_executor(settings.executor, state_dir, offered)
    try:
        run_server(options, offered, chosen_policy, log, ready, executor,
                   sock=sock, **({"provisioner": provisioner} if provisioner is not None else {}))
    except ServerError as exc:
        raise fail(str(exc)) from None


def _plugin_executor(name: str, state_dir: Path, slots: list):
    """None for the local executor (the server builds it), else the plugin ``name`` built for ``slots``."""
    from apportion.serve.app.executor_plugin import plugin_executor

    try:
        return plugin_executor(name, state_dir, slots)
    except ValueError as exc:
        raise fail(f"--executor: {exc}") from None


@dataclass(frozen=True)
class _Origins:
    """Where the settings came from: the config file (None without one), or the command line
    (``flags``: the keys given as flags, a policy option by its key in a file)."""

    file: SettingsFile | None
    flags: frozenset[str]

    def in_file(self, key: str) -> bool:
        return self.file is not None and key in self.file.lines and key not in self.flags

    def blame(self, key: str, message: str, as_flag: str) -> str:
        """The error about setting ``key``: at its line in the file if it came from there, else ``as_flag``."""
        return str(self.file.error(key, message)) if self.in_file(key) else as_flag


def _settings(ctx: typer.Context, config: Optional[Path]):
    """The settings in effect, checked: the command line's flags over the config file's keys over
    the defaults; and where each came from. One-line errors naming the flag, or the file's line."""
    from apportion.core.errors import InputError
    from apportion.serve.app.settings import SETTINGS, ServeSettings, SettingError, check_settings
    from apportion.serve.app.settings_file import load_settings_file

    try:
        file = load_settings_file(config) if config is not None else None
    except InputError as exc:
        raise fail(str(exc)) from None
    flags = {key for key in SETTINGS if ctx.get_parameter_source(key).name == "COMMANDLINE"}
    values = {key: ctx.params[key] for key in SETTINGS}
    policy_options = opt.given_policy_options(ctx)
    if file is not None:
        overridden = flags | ({"token", "token_file"} if flags & {"token", "token_file"} else set())  # one credential
        values.update({key: value for key, value in file.values.items() if key not in overridden})
        flags |= {file.key_of(name) for name in policy_options}
        policy_options = {**file.policy_options, **policy_options}
    given = _Origins(file, frozenset(flags))
    values["state_dir"] = Path(values["state_dir"]).expanduser()
    if values["market"] is not None:  # the repeated flag (typer: () when not given): every file read
        values["market"] = tuple(values["market"]) or None
    try:
        settings = check_settings(ServeSettings(**values, policy_options=policy_options),
                                  in_file=[key for key in SETTINGS if given.in_file(key)])
    except SettingError as exc:
        raise fail(given.blame(exc.key, exc.message, exc.as_flag())) from None
    return settings, given


def _check_slots(settings: ServeSettings, given: _Origins) -> None:
    """The slots' spelling checked, without looking for this machine's GPUs."""
    from apportion.core.errors import InputError
    from apportion.serve.base.slots import parse_slots

    if settings.slots is not None:
        try:
            parse_slots(settings.slots)
        except InputError as exc:
            raise fail(given.blame("slots", exc.message, str(exc))) from None


def _check_policy_options(settings: ServeSettings, given: _Origins) -> dict:
    """The policy options read (files loaded) and checked against the policy; a one-line error
    naming the flag, or the line of the config file's key it came from."""
    from apportion.experiment import check_policy_specs

    options = opt.read_policy_options(settings.policy_options)
    try:
        check_policy_specs([settings.policy], **options)
    except ValueError as exc:
        raise fail(_blame_policy(str(exc), settings, given)) from None
    return options


def _blame_policy(message: str, settings: ServeSettings, given: _Origins) -> str:
    """A policy's error at the line of the key it is about, when that key came from the config file."""
    from apportion.serve.app.settings_file import policy_option_keys

    if given.file is None:
        return message
    for key, option in policy_option_keys().items():
        if message.startswith(option.cli_flag + " ") and option.name in settings.policy_options:
            return given.blame(key, message.removeprefix(option.cli_flag + " "), message)
    return given.blame("policy", message, message)


def _take_port(host: str, port: int):
    """A socket listening on ``host:port``; a one-line error when the port is taken."""
    from apportion.serve.app.startup import ServerError, listen

    try:
        return listen(host, port)
    except ServerError as exc:
        raise fail(str(exc)) from None


def _ray_backend(state_dir: Path, address: Optional[str], cluster: Optional[Path], given: _Origins,
                 rented: bool = False):
    """The Ray cluster's slots and executor (one-line errors)."""
    from apportion.core.errors import InputError
    from apportion.serve.app.on_ray import RayUnavailable, ray_backend
    from apportion.workloads.cluster_file import load_ray_settings

    try:
        settings = load_ray_settings(cluster) if cluster is not None else None
    except InputError as exc:
        raise fail(str(exc)) from None
    try:
        return ray_backend(state_dir, address, settings, rented)
    except (InputError, RayUnavailable) as exc:
        raise fail(given.blame("ray_address", str(exc), str(exc)) if address is not None else str(exc)) from None


def _provisioner(settings: ServeSettings, given: _Origins, backend, offered: list):
    """The Ray autoscaler's provisioner over ``--market`` (read, or the seeded synthetic one) for the
    slots ``offered`` (the most of each type); one-line errors naming the market's file and line."""
    from apportion.core.errors import InputError
    from apportion.policies.provisioning import make_provisioning
    from apportion.serve.app.on_ray import RayAutoscalerProvisioner
    from apportion.workloads.market_files import read_market
    from apportion.workloads.synthetic_market import synthetic_market

    try:
        market = synthetic_market() if settings.market == ("synthetic",) else read_market(list(settings.market))
    except (InputError, OSError) as exc:
        raise fail(given.blame("market", str(exc), f"--market: {exc}")) from None
    for note in market.notes:  # where the market starts, what was left out before it
        errors.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    types = tuple(dict.fromkeys(s.gpu_type for s in offered))
    if not set(market.gpu_type.tolist()) & set(types):
        message = (f"offers no instance of the slots' GPU types ({', '.join(types)}); it has"
                   f" {', '.join(sorted(set(market.gpu_type.tolist())))}")
        raise fail(given.blame("market", message, f"--market {' '.join(settings.market)} {message}"))
    most = {t: sum(s.gpu_type == t for s in offered) for t in types}
    return RayAutoscalerProvisioner(backend.executor, market, make_provisioning(settings.provisioning), types, most,
                                    settings.round_s)


def _slurm_backend(state_dir: Path, partition: Optional[str], account: Optional[str]):
    """The Slurm partition's slots and executor (one-line errors)."""
    from apportion.serve.app.on_slurm import SlurmUnavailable, slurm_backend

    try:
        return slurm_backend(state_dir, partition, account)
    except SlurmUnavailable as exc:
        raise fail(f"--executor slurm: {exc}") from None


def _job_host(host: str, executor: str = "ray") -> str | None:
    """The address jobs on other nodes reach a server bound to ``host`` at (this machine's, for 0.0.0.0)."""
    if host in ("0.0.0.0", "::", "") and executor == "slurm":
        import socket

        return socket.getfqdn()
    if host in ("0.0.0.0", "::", ""):
        import ray

        return ray.util.get_node_ip_address()
    return None


def _credentials(settings: ServeSettings, given: _Origins):
    """The admin token (from the token file, or the deprecated token) and the run-as setting; one-line
    errors at the flag, or at the config file's line."""
    import os

    from apportion.serve.accounts.auth import check_secret, read_secret_file
    from apportion.serve.accounts.runas import choose, load_user_map

    token, token_file = settings.token, settings.token_file
    try:
        if token is not None:
            admin_token = check_secret(token, "--token")
            if not given.in_file("token"):
                errors.print("warning: --token is visible to every user of this machine (ps, /proc); "
                             "use --token-file", highlight=False)
        elif token_file is not None:
            where = str(token_file) if given.in_file("token_file") else f"--token-file {token_file}"
            admin_token = read_secret_file(token_file, where)
        else:
            admin_token = None
    except ValueError as exc:
        key = "token" if token is not None else "token_file"
        raise fail(given.blame(key, str(exc).removeprefix("--token "), str(exc))) from None
    try:
        mapping = load_user_map(settings.user_map) if settings.user_map is not None else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        return admin_token, choose(settings.run_as, os.geteuid(), mapping, job_path=settings.job_path)
    except ValueError as exc:
        raise fail(given.blame("run_as", str(exc).removeprefix("--run-as "), str(exc))) from None


def _clock(when: Optional[float] = None) -> str:
    import time as _time

    return _time.strftime("%H:%M:%S", _time.localtime(when))


def _user_weights(settings: ServeSettings) -> dict[str, float]:
    """The users' weights given (checked already by check_settings), user -> weight."""
    from apportion.policies.by_user import parse_user_weights

    return parse_user_weights(settings.user_weights) if settings.user_weights else {}


def _shared(settings: ServeSettings, policy) -> str:
    """How the users share the cluster, for the start's line: "" when they do not."""
    from apportion.policies.by_user import how_shared

    if not settings.share_by_user:
        return ""
    weights = f" (weights {settings.user_weights})" if settings.user_weights else ""
    if how_shared(policy) == "unchanged":
        return f" (not shared by user: {policy.name} divides the cluster its own way)"
    return f" shared by user{weights}"
