"""The settings ``apportion serve`` takes, with their defaults and their checks, one place for
the command line's flags and a config file's keys (``serve/app/settings_file.py``) alike.

A setting is named by its key (``round_s``); its flag is the key with dashes (``--round-s``).
``check_settings`` refuses a value out of range with a :class:`SettingError` naming the key, and
each caller says where the value came from: the flag, or the file's line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Collection

from apportion.serve.accounts.limits import Limits
from apportion.serve.resources.base import BadSetting
from apportion.serve.resources.registry import check_settings as check_resources, listed, with_settings

DEFAULT_STATE_DIR = Path("~/.apportion/server")
EXECUTORS = ("local", "ray", "slurm")
RUN_AS = ("server-user", "mapped", "refuse")  # serve/accounts/runas.py's MODES, named here without importing it
RECEIVED_SINCE = ("allocation", "arrival")  # mechanism/received.py's rules, named here without importing numpy
# policies/provisioning's PROVISIONING, named here without importing numpy
PROVISIONING = ("static", "cheapest-now", "cheapest-now:daily", "spot-fallback", "deadline-aware")


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``apportion serve`` is told, before anything is started: flags, or a config file's keys
    (each optional resource adds its own after these: resources/registry.py)."""

    state_dir: Path = DEFAULT_STATE_DIR  # the state file, logs and default checkpoints
    host: str = "127.0.0.1"  # the address to bind; anything but loopback needs credentials
    port: int = 8642  # 0: any free port
    token: str | None = None  # an admin token given as text (prefer token_file)
    token_file: Path | None = None  # a file (0600) holding the admin token
    run_as: str | None = None  # server-user, mapped or refuse; None: refuse as root, else server-user
    user_map: Path | None = None  # run_as mapped: apportion user -> OS account
    job_path: str = "/usr/local/bin:/usr/bin:/bin"  # run_as mapped: the PATH jobs start with (never the server's)
    slots: str | None = None  # TYPE:COUNT,...; None: this machine's GPUs, else cpu:1
    policy: str = "las"
    round_s: float = 180.0
    received_since: str = "allocation"  # the received share counts from the last re-solve (Gavel's) or from arrival
    share_by_user: bool = True  # the cluster divided among users first, then the policy per user (policies/by_user.py)
    user_weights: str | None = None  # USER=WEIGHT,…: a user's share of the cluster, relative (a user not named: 1)
    max_retries: int = 3
    hung_after_s: float = 900.0  # 0: never
    retry_backoff_s: float = 10.0  # a crash's retry waits this × 2^(k-1) (lifecycle.retry_delay_s); 0: at once
    grace_s: float = 30.0
    checkpoint_every: str | None = None  # auto, auto:SECONDS, off or SECONDS; None: auto
    executor: str = "local"
    ray_address: str | None = None
    cluster: Path | None = None  # executor ray: the cluster file
    slurm_partition: str | None = None  # executor slurm: the partition apportion submits to (None: Slurm's default)
    slurm_account: str | None = None  # executor slurm: the Slurm account its jobs are charged to (not under run_as mapped)
    market: tuple[str, ...] | None = None  # rent the Ray cluster's nodes from this market: files or directories, merged, or ("synthetic",); None: owned
    provisioning: str = "static"  # with market: which instances to rent (policies/provisioning)
    warm_start: bool = True
    notify_hosts: str | None = None  # where jobs' notify: URLs may point (serve/jobs/notify_hosts.py); None: the default rule
    # each user's budgets (budgets.py; docs/serve.md's threat model says why these defaults)
    # each user's budgets (accounts/budgets.py holds their defaults)
    max_active_jobs: int = Limits.max_active_jobs
    max_stored_mb: float = Limits.max_stored_mb
    max_demand_rows: int = Limits.max_demand_rows
    max_after_edges: int = Limits.max_after_edges
    submit_rate: float = Limits.submit_rate
    submit_burst: int = Limits.submit_burst
    user_budgets: dict[str, dict[str, float]] = field(default_factory=dict)  # config file only: user -> limits
    policy_options: dict[str, Any] = field(default_factory=dict)  # the policy options asked for, by option name


ServeSettings = with_settings(ServeSettings, "settings")
SETTINGS: tuple[str, ...] = listed(tuple(f.name for f in fields(ServeSettings)
                                          if f.name not in ("policy_options", "user_budgets")), "settings")
BUDGETS = ("max_active_jobs", "max_stored_mb", "max_demand_rows", "max_after_edges", "submit_rate", "submit_burst")
DEFAULTS = ServeSettings()
PATHS = frozenset({"state_dir", "token_file", "user_map", "cluster"})


def flag(key: str) -> str:
    """The command-line flag of setting ``key``: ``round_s`` -> ``--round-s``."""
    return "--" + key.replace("_", "-")


class SettingError(ValueError):
    """A setting's value refused: ``key`` names it, ``message`` says what is wrong (without naming it)."""

    def __init__(self, key: str, message: str, joiner: str = " ") -> None:
        self.key = key
        self.message = message
        self.joiner = joiner  # between the flag and the message on the command line
        super().__init__(self.as_flag())

    def as_flag(self) -> str:
        """The error as the command line says it: ``--round-s must be positive, got 0``."""
        return f"{flag(self.key)}{self.joiner}{self.message}"


def check_settings(settings: ServeSettings, in_file: Collection[str] = ()) -> ServeSettings:
    """``settings`` checked (``checkpoint_every`` in its normal form); SettingError naming the first
    one out of range. A message names another setting as its flag, or as its key when the setting
    at fault came from a file (its keys ``in_file``)."""
    from apportion.serve.base.bounds import MAX_HUNG_AFTER_S, MAX_RETRY_BACKOFF_S, MIN_HUNG_AFTER_S

    def other(blamed: str, key: str, value: str = "") -> str:
        if blamed in in_file:
            return f"{key}: {value}" if value else key
        return f"{flag(key)} {value}" if value else flag(key)

    s = settings
    if not 0 <= s.port <= 65535:
        raise SettingError("port", f"must be 0-65535, got {s.port}")
    if not s.host.strip():
        raise SettingError("host", "must be an address, got nothing")
    if not s.round_s > 0:  # NaN too
        raise SettingError("round_s", f"must be positive, got {s.round_s:g}")
    if s.received_since not in RECEIVED_SINCE:
        raise SettingError("received_since", f"must be one of {', '.join(RECEIVED_SINCE)}, got {s.received_since!r}")
    if s.user_weights is not None:
        from apportion.policies.by_user import parse_user_weights

        try:
            parse_user_weights(s.user_weights)
        except ValueError as exc:
            raise SettingError("user_weights", str(exc), joiner=": ") from None
    if s.max_retries < 0:
        raise SettingError("max_retries", f"must be >= 0, got {s.max_retries}")
    if not 0 <= s.retry_backoff_s <= MAX_RETRY_BACKOFF_S:
        raise SettingError("retry_backoff_s", f"must be from 0 (retry at once) to {MAX_RETRY_BACKOFF_S:g} seconds, "
                                              f"got {s.retry_backoff_s:g}")
    if s.hung_after_s != 0 and not MIN_HUNG_AFTER_S <= s.hung_after_s <= MAX_HUNG_AFTER_S:
        raise SettingError("hung_after_s", f"must be 0 (never) or from {MIN_HUNG_AFTER_S:g} to "
                                           f"{MAX_HUNG_AFTER_S:g} seconds, got {s.hung_after_s:g}")
    if not s.grace_s >= 0:
        raise SettingError("grace_s", f"must be >= 0, got {s.grace_s:g}")
    for key in ("round_s", "grace_s"):
        if math.isinf(getattr(s, key)):
            raise SettingError(key, "must be finite, got inf")
    checkpoint_every = s.checkpoint_every
    if checkpoint_every is not None:
        from apportion.runtime.cadence import CheckpointEvery

        try:
            checkpoint_every = str(CheckpointEvery.parse(checkpoint_every, source="checkpoint_every"))
        except ValueError as exc:
            raise SettingError("checkpoint_every", str(exc).removeprefix("checkpoint_every: ")) from None
    if s.notify_hosts is not None:
        from apportion.core.errors import InputError
        from apportion.serve.jobs.notify_hosts import NotifyHosts

        try:
            NotifyHosts.parse(s.notify_hosts, source="notify_hosts")
        except InputError as exc:
            raise SettingError("notify_hosts", exc.message, joiner=": ") from None
    try:
        check_resources(s)  # each optional resource's settings
    except BadSetting as exc:
        raise SettingError(exc.key, exc.message, joiner=exc.joiner) from None
    for key in BUDGETS:
        _check_budget(key, getattr(s, key))
    for user, limits in s.user_budgets.items():
        for key, value in limits.items():
            if key not in BUDGETS:
                raise SettingError("user_budgets", f"{user}: {key}: unknown budget (known: {', '.join(BUDGETS)})",
                                   joiner=": ")
            try:
                _check_budget(key, value)
            except SettingError as exc:
                raise SettingError("user_budgets", f"{user}: {key} {exc.message}", joiner=": ") from None
    if s.run_as is not None and s.run_as not in RUN_AS:
        raise SettingError("run_as", f"must be one of {', '.join(RUN_AS)}, got {s.run_as!r}")
    relative = [d for d in s.job_path.split(":") if not d.startswith("/")]
    if relative or "\0" in s.job_path:  # "" or "." would be wherever the job runs: the user's own directory
        raise SettingError("job_path", f"must be absolute directories separated by ':', got {s.job_path!r}")
    if s.token is not None and s.token_file is not None:
        raise SettingError("token", f"cannot be combined with {other('token', 'token_file')}: give one")
    if s.executor not in EXECUTORS:
        _check_plugin("executor", s.executor, "local, ray or slurm")
    if s.provisioning not in PROVISIONING:
        _check_plugin("provisioning", s.provisioning, "one of " + ", ".join(PROVISIONING))
    if s.provisioning != DEFAULTS.provisioning and s.market is None:
        raise SettingError("provisioning", f"needs {other('provisioning', 'market', 'FILE')} (or synthetic)")
    if s.market is not None and (not s.market or not all(isinstance(m, str) and m.strip() for m in s.market)):
        raise SettingError("market", "must be market files or directories, or synthetic, got nothing")
    if s.market is not None and "synthetic" in s.market and len(s.market) > 1:
        raise SettingError("market", "synthetic is a market of its own: give it alone, or only files")
    if s.market is not None and s.executor != "ray":
        raise SettingError("market", f"needs {other('market', 'executor', 'ray')}: rented instances join a Ray"
                                     " cluster as its nodes (docs/cloud.md)")
    for key in ("slurm_partition", "slurm_account"):
        value = getattr(s, key)
        if value is not None and s.executor != "slurm":
            raise SettingError(key, f"needs {other(key, 'executor', 'slurm')}")
        if value is not None and (not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", value)):
            raise SettingError(key, f"must be a Slurm name (letters, digits, _ . -), got {value!r}")
    if s.executor == "slurm" and s.slots is not None:
        raise SettingError("slots", "on Slurm the slots are the partition's GPUs (its nodes' GRES; docs/slurm.md)",
                           joiner=": ")
    if s.executor != "ray":  # local, slurm, or a plugin's executor on the slots --slots gives
        for key in ("ray_address", "cluster"):
            if getattr(s, key) is not None:
                raise SettingError(key, f"needs {other(key, 'executor', 'ray')}")
    else:
        if s.slots is not None:
            raise SettingError("slots", "on Ray the slots are the cluster's GPUs; declare their types in "
                                        f"{other('slots', 'cluster', 'FILE')} (docs/ray.md)", joiner=": ")
        if s.run_as == "mapped":
            raise SettingError("run_as", "mapped: on Ray, jobs run as the OS user of the Ray workers; it needs "
                                         f"{other('run_as', 'executor', 'local')}")
    return replace(settings, checkpoint_every=checkpoint_every)


def _check_plugin(key: str, name: str, known: str) -> None:
    """A setting that names no built-in: a plugin's (apportion.plugins), loaded now; its error, or the known names."""
    try:
        if key == "executor":
            from apportion.executors.plugin_executors import find_executor

            find_executor(name)
        else:
            from apportion.policies.provisioning import make_provisioning

            make_provisioning(name)
    except ValueError as exc:
        if str(exc).startswith("unknown "):
            raise SettingError(key, f"must be {known}, got {name!r} (or a plugin's name: docs/policies.md)") from None
        raise SettingError(key, str(exc), joiner=": ") from None


def _check_budget(key: str, value: float) -> None:
    """A budget's value: a whole number >= 0 (0: nothing may be held), a size >= 0, a rate > 0, a burst >= 1."""
    if key in ("max_stored_mb", "submit_rate"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SettingError(key, f"must be a finite number, got {value!r}")
        if key == "submit_rate" and not value > 0:
            raise SettingError(key, f"must be a positive number of submits a second, got {value:g}")
        if not value >= 0:
            raise SettingError(key, f"must be >= 0 (MB), got {value:g}")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(key, f"must be a whole number, got {value!r}")
    least = 1 if key == "submit_burst" else 0
    if not least <= value < 2**63:
        raise SettingError(key, f"must be a whole number from {least} up, got {value}")
