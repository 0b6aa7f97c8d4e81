"""The arguments of simulate, compare and sweep, checked and turned into what the library runs.

The command line and the Python API (``apportion.simulate``, ``compare``, ``sweep``) both call
these, so they take the same arguments, with the same defaults, and refuse the same ones with the
same message: ``ArgumentError`` names an argument as the caller spells it (``--rate`` on the
command line, ``rate`` in Python). Heavy modules are imported inside the functions: the command
line imports this module for every command.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apportion.core.market import Market
    from apportion.core.queues import QueueConfig
    from apportion.experiment import Inputs, WorkloadSettings
    from apportion.sim import SimConfig
    from apportion.sim.rented import RentalConfig

Spelling = Callable[[str], str]


def flag(name: str) -> str:
    """An argument as the command line spells it: ``start_s`` → ``--start-s``."""
    return "--" + name.replace("_", "-")


def keyword(name: str) -> str:
    """An argument as Python spells it: its keyword."""
    return name


class ArgumentError(ValueError):
    """A bad argument, or inputs that cannot be replayed: one line saying which and what is wrong.

    ``str(err)`` names arguments by their Python keywords; ``err.spelled(flag)`` by their flags.
    """

    def __init__(self, template: str):
        self.template = template  # arguments named as {name}; any other brace doubled
        super().__init__(self.spelled(keyword))

    @classmethod
    def plain(cls, message: str) -> ArgumentError:
        """An error whose message names no argument (a file's, a policy's): shown as it is."""
        return cls(_shown(message))

    def spelled(self, spell: Spelling) -> str:
        return self.template.format_map(_Spelled(spell))


class _Spelled(dict):
    def __init__(self, spell: Spelling):
        super().__init__()
        self.spell = spell

    def __missing__(self, name: str) -> str:
        return self.spell(name)


def _shown(value: object) -> str:
    """A value inside a message template: its braces doubled, so that they stay braces."""
    return str(value).replace("{", "{{").replace("}", "}}")


def _got(value: object) -> str:
    return _shown(repr(value) if isinstance(value, str) else value)


# ---------------------------------------------------------------------------------------------
# single arguments


def workload_settings(workload: str | None, cluster: str, jobs: int | None, rate: float, seed: int,
                      start_s: float | None, end_s: float | None, throughputs: str | None, reference_gpu_type: str,
                      shape: str = "philly", trace_format: str | None = None) -> WorkloadSettings:
    """Where the jobs, the cluster and the speeds come from; ``trace_format`` how to read the workload
    file (one of ``workloads.trace_formats.FORMATS``; None: told by its content)."""
    from apportion.experiment import WorkloadSettings
    from apportion.workloads.synthetic import SHAPES

    if jobs is not None and jobs <= 0:
        raise ArgumentError(f"{{jobs}} must be positive, got {_shown(jobs)}")
    if rate <= 0:
        raise ArgumentError(f"{{rate}} must be positive, got {_shown(rate)}")
    if shape not in SHAPES:
        raise ArgumentError(f"{{shape}} must be one of {', '.join(SHAPES)}, got '{_shown(shape)}'")
    if workload and shape != "philly":
        raise ArgumentError("{shape} applies to the synthetic workload only, not to {workload}")
    if trace_format is not None:
        from apportion.workloads.trace_formats import FORMATS

        if not workload:
            raise ArgumentError("{trace_format} applies with {workload} FILE only")
        if trace_format not in FORMATS:
            raise ArgumentError(f"{{trace_format}}: unknown trace format '{_shown(trace_format)}' "
                                f"(known: {', '.join(FORMATS)})")
    return WorkloadSettings(
        path=None if workload is None else str(workload), jobs=jobs, rate_per_hour=rate, seed=seed, start_s=start_s,
        end_s=end_s, reference_gpu_type=reference_gpu_type, cluster=str(cluster),
        throughputs_path=None if throughputs is None else str(throughputs), shape=shape, trace_format=trace_format,
    )


def check_cpu_split(cpu_split: str) -> None:
    """Refuse a ``cpu_split`` the simulator does not know."""
    from apportion.sim.cpu_cores import CPU_SPLITS

    if cpu_split not in CPU_SPLITS:
        raise ArgumentError(f"{{cpu_split}} must be one of {', '.join(CPU_SPLITS)}, got '{_shown(cpu_split)}'")


def with_privacy(settings: WorkloadSettings, blocks: str | None, privacy_policy: str, privacy_n: int | None,
                 privacy_t: float | None, privacy_timeout_s: float | None, privacy_decide: str = "arrival",
                 privacy_rejected_portions: str = "lost") -> WorkloadSettings:
    """``settings`` with the privacy-budget arguments, checked (``blocks`` and those that go with it)."""
    from apportion.mechanism.privacy_policies import PRIVACY_POLICIES, PrivacyPolicy

    if blocks is None:
        given = [name for name, value in (("privacy_n", privacy_n), ("privacy_t", privacy_t),
                                          ("privacy_timeout_s", privacy_timeout_s)) if value is not None]
        if given:
            raise ArgumentError(f"{{{given[0]}}} applies with {{blocks}} only")
        return settings
    if privacy_timeout_s is not None and not privacy_timeout_s > 0:
        raise ArgumentError(f"{{privacy_timeout_s}} must be positive, got {_shown(privacy_timeout_s)}")
    if privacy_decide not in ("arrival", "round"):
        raise ArgumentError(f"{{privacy_decide}} must be one of arrival, round, got '{_shown(privacy_decide)}'")
    if privacy_rejected_portions not in ("lost", "returned"):
        raise ArgumentError(f"{{privacy_rejected_portions}} must be one of lost, returned, got "
                            f"'{_shown(privacy_rejected_portions)}'")
    if privacy_policy not in PRIVACY_POLICIES:
        from apportion.mechanism.privacy_policies import make_privacy_policy

        try:
            make_privacy_policy(privacy_policy, privacy_n, privacy_t)  # a plugin, or an error naming the known ones
        except ValueError as exc:
            if str(exc).startswith("unknown privacy policy"):
                raise ArgumentError(f"{{privacy_policy}} must be one of {', '.join(PRIVACY_POLICIES)}, got "
                                    f"'{_shown(privacy_policy)}' (or a plugin's name: docs/policies.md)") from None
            raise ArgumentError(f"{{privacy_policy}}: {_shown(exc)}") from None
    elif privacy_policy == "dpf-n" and privacy_n is None:
        raise ArgumentError("{privacy_policy} dpf-n needs {privacy_n}")
    if privacy_policy == "dpf-t" and privacy_t is None:
        raise ArgumentError("{privacy_policy} dpf-t needs {privacy_t}")
    if privacy_policy in ("rr", "pack") and (privacy_n is None) == (privacy_t is None):
        raise ArgumentError(f"{{privacy_policy}} {privacy_policy} needs one of {{privacy_n}} (unlock by claims) "
                            "or {privacy_t} (by time)")
    if privacy_policy in PRIVACY_POLICIES:
        try:
            PrivacyPolicy(privacy_policy, privacy_n, privacy_t)
        except ValueError as exc:
            raise ArgumentError.plain(str(exc)) from None
    return replace(settings, blocks_path=str(blocks), privacy_policy=privacy_policy, privacy_n=privacy_n,
                   privacy_t_s=privacy_t, privacy_timeout_s=privacy_timeout_s, privacy_decide=privacy_decide,
                   privacy_rejected_portions=privacy_rejected_portions)


def sim_config(round_s: float, restart_cost_s: float, learn_models: bool = False, cpu_split: str = "proportional",
               received_since: str | None = None, share_by_user: bool = False,
               user_weights: str | None = None) -> SimConfig:
    """The mechanism's settings for a replay."""
    from apportion.mechanism.received import RECEIVED_SINCE
    from apportion.sim import SimConfig

    if round_s <= 0:
        raise ArgumentError(f"{{round_s}} must be positive, got {_shown(round_s)}")
    if restart_cost_s < 0:
        raise ArgumentError(f"{{restart_cost_s}} must be >= 0, got {_shown(restart_cost_s)}")
    check_cpu_split(cpu_split)
    config = SimConfig(round_s=round_s, restart_cost_s=restart_cost_s, learn_models=learn_models, cpu_split=cpu_split)
    if received_since is not None:
        if received_since not in RECEIVED_SINCE:
            raise ArgumentError(f"{{received_since}} must be one of {', '.join(RECEIVED_SINCE)}, "
                                f"got '{_shown(received_since)}'")
        config = replace(config, received_since=received_since)
    weights = parse_user_weights(share_by_user, user_weights)
    if share_by_user:
        config = replace(config, share_by_user=True, user_weights=weights)
    return config


def parse_user_weights(share_by_user: bool, text: str | None) -> tuple[tuple[str, float], ...]:
    """``user_weights`` (``alice=2,bob=1``) as (user, weight) pairs; refused when malformed or given alone."""
    if text is None:
        return ()
    if not share_by_user:
        raise ArgumentError("{user_weights} needs {share_by_user}")
    from apportion.policies.by_user import parse_user_weights as parse

    try:
        return tuple(parse(text).items())
    except ValueError as exc:
        raise ArgumentError(f"{{user_weights}}: {_shown(exc)}") from None


def out_dir_problem(path: Path) -> str | None:
    """Why files cannot be written into directory ``path`` (it is a file, or it cannot be created
    or written), or None when they can. Checked before a long run, creating nothing."""
    path = Path(path).expanduser()
    if path.exists():
        if not path.is_dir():
            return f"{path} exists and is not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is not writable"
        return None
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot create {path}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create {path}: {parent} is not writable"
    return None


def check_out(out: Path | str | None) -> None:
    """Refuse an ``out`` directory that cannot be written before the replay, not after it."""
    problem = None if out is None else out_dir_problem(Path(out))
    if problem is not None:
        raise ArgumentError(f"{{out}}: {_shown(problem)}")


def names(value: str | Sequence[str], name: str, separator: str = ",") -> list[str]:
    """A list argument given as ``a,b`` text (the command line's way) or as a list of names."""
    items = value.split(separator) if isinstance(value, str) else [str(v) for v in value]
    items = [item.strip() for item in items if item.strip()]
    if not items:
        raise ArgumentError(f"{{{name}}} is empty")
    return items


def numbers(value: str | Iterable[float], name: str, kind: type) -> list:
    """Numbers given as ``4,8,12`` text, as a list or as one number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    try:
        values = [kind(v) for v in (value.split(",") if isinstance(value, str) else value)
                  if not isinstance(v, str) or v.strip()]
    except (TypeError, ValueError):
        raise ArgumentError(f"{{{name}}} must be comma-separated numbers, got {_got(value)}") from None
    if not values:
        raise ArgumentError(f"{{{name}}} is empty")
    return values


def seed_list(value: str | int | Iterable[int]) -> list[int]:
    """``0-4`` → [0, 1, 2, 3, 4]; ``1,5,7`` → [1, 5, 7]; a number or a list (``range(5)``) as it is."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        low, dash, high = value.partition("-")
        if dash and low.strip().isdigit() and high.strip().isdigit():
            if int(high) < int(low):
                raise ArgumentError(f"{{seeds}}: {_got(value)} is an empty range")
            return list(range(int(low), int(high) + 1))
    return numbers(value, "seeds", int)


# ---------------------------------------------------------------------------------------------
# policy options


def read_policy_options(given: dict[str, Any]) -> dict[str, Any]:
    """Policy options by name (``make_policy``'s keywords), the files they name read (``queues``:
    its QueueConfig; one already read is kept as it is)."""
    from apportion.core.queues import QueueConfig
    from apportion.policies.registry import declared_options

    read = {QueueConfig: load_queues}
    readers = {o.name: read[o.type] for o in declared_options() if o.type in read}
    return {name: readers[name](value) if name in readers and isinstance(value, (str, os.PathLike)) else value
            for name, value in given.items()}


def load_queues(path: str | os.PathLike | None) -> QueueConfig | None:
    """The ``queues`` file, or None without one."""
    if path is None:
        return None
    from apportion.core.errors import InputError
    from apportion.workloads.queues import load_queues as read

    try:
        return read(str(path))
    except InputError as exc:
        raise ArgumentError.plain(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# a whole replay's arguments


@dataclass(frozen=True)
class Replay:
    """What simulate and compare run: the inputs, the mechanism's settings, the policy options and,
    on a rented cluster, the market and the rental's settings (None on the cluster given)."""

    inputs: Inputs
    config: SimConfig
    options: dict
    market: Market | None = None
    rental: RentalConfig | None = None


def prepare_replay(specs: list[str], options: dict, settings: WorkloadSettings, config: SimConfig) -> Replay:
    """Check the policies and their options (files already read), then load the inputs."""
    from apportion.core.errors import InputError
    from apportion.experiment import check_policy_specs, load_inputs

    try:
        check_policy_specs(specs, **options)
    except ValueError as exc:
        raise ArgumentError.plain(str(exc)) from None
    queue_config = options.get("queues")
    try:
        inputs = load_inputs(settings)
        if queue_config is not None:
            queue_config.check_cluster(inputs.cluster.gpu_types, inputs.cluster.capacity)
    except (InputError, OSError, ValueError) as exc:
        raise ArgumentError.plain(str(exc)) from None
    return Replay(inputs, config, options)


def market_sources(market: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str]:
    """``market`` as a list of sources: one file, directory or ``synthetic``, or several (none: no market)."""
    if market is None:
        return []
    return [str(market)] if isinstance(market, (str, os.PathLike)) else [str(m) for m in market]


def check_market_options(market: list[str], market_start: str | None, interruption_rates: str | None) -> None:
    """Refuse ``market_start`` and ``interruption_rates`` without a market."""
    for name, value in (("market_start", market_start), ("interruption_rates", interruption_rates)):
        if value is not None and not market:
            raise ArgumentError(f"{{{name}}} applies with {{market}} FILE only")


def on_market(replay: Replay, market: list[str], provisioning: list[str], checkpoint_gb: float, seed: int,
              market_start: str | None = None, interruption_rates: str | None = None) -> Replay:
    """``replay`` on instances rented from ``market`` (files merged, or ``synthetic``), the provisioning
    policies (built-ins or plugins) checked first."""
    from apportion.core.errors import InputError
    from apportion.experiment import load_market
    from apportion.policies.provisioning import PROVISIONING, make_provisioning
    from apportion.sim.rented import RentalConfig

    for spec in provisioning:
        if spec not in PROVISIONING:
            try:
                make_provisioning(spec)  # a plugin: loaded now, so that a broken one is said before the replay
            except ValueError as exc:
                if str(exc).startswith("unknown provisioning policy"):
                    raise ArgumentError(f"{{provisioning}}: unknown policy '{_shown(spec)}' (known: "
                                        f"{', '.join(PROVISIONING)}, or a plugin's name: docs/policies.md)") from None
                raise ArgumentError(f"{{provisioning}}: {_shown(exc)}") from None
    if not checkpoint_gb >= 0:
        raise ArgumentError(f"{{checkpoint_gb}} must be >= 0, got {_shown(checkpoint_gb)}")
    try:
        loaded = load_market(market, replay.inputs.throughputs, seed, start=market_start,
                             interruption_rates=None if interruption_rates is None else str(interruption_rates))
    except (InputError, OSError) as exc:
        raise ArgumentError.plain(str(exc)) from None
    return replace(replay, market=loaded, rental=RentalConfig(checkpoint_gb=checkpoint_gb))


def replay_arguments(specs: list[str], policy_options: dict, *, workload, cluster, jobs, rate, seed, shape, start_s,
                     end_s, throughputs, reference_gpu_type, round_s, restart_cost_s, learn_models, cpu_split, blocks,
                     privacy_policy, privacy_n, privacy_t, privacy_timeout_s, privacy_decide="arrival",
                     privacy_rejected_portions="lost", trace_format=None,
                     received_since=None,
                     share_by_user=False, user_weights=None, market=None, market_start=None,
                     interruption_rates=None, provisioning: Sequence[str] = (), checkpoint_gb: float = 10.0) -> Replay:
    """simulate's and compare's arguments (``policy_options`` as given, by name) checked, in the
    command line's order, and the inputs loaded: what ``run`` replays."""
    market = market_sources(market)
    check_market_options(market, market_start, interruption_rates)
    check_cpu_split(cpu_split)
    config = sim_config(round_s, restart_cost_s, learn_models, cpu_split, received_since, share_by_user, user_weights)
    options = read_policy_options(policy_options)
    settings = with_privacy(workload_settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs,
                                              reference_gpu_type, shape, trace_format),
                            blocks, privacy_policy, privacy_n, privacy_t, privacy_timeout_s, privacy_decide,
                            privacy_rejected_portions)
    replay = prepare_replay(specs, options, settings, config)
    if not market:
        return replay
    return on_market(replay, market, list(provisioning), checkpoint_gb, seed, market_start, interruption_rates)


def run(replay: Replay, specs: Sequence[str], *, workers: int = 1, progress=None, record_holdings: bool = False):
    """Replay each spec (a policy, or on a market a provisioning policy); results in spec order.
    ``progress(spec, ended, total, now_s)``. A policy that cannot work on these inputs is an ArgumentError."""
    from apportion.compare import run_policies
    from apportion.experiment import run_rented

    try:
        if replay.market is None:
            return run_policies(replay.inputs, list(specs), replay.config, workers=workers, progress=progress,
                                record_holdings=record_holdings, **replay.options)
        # a rented replay takes seconds: one after another, in this process
        return [run_rented(replay.inputs, replay.market, spec, replay.config, replay.rental,
                           progress=None if progress is None else
                           (lambda ended, total, now_s, spec=spec: progress(spec, ended, total, now_s)))
                for spec in specs]
    except ValueError as exc:  # e.g. min-cost without prices
        raise ArgumentError.plain(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# a sweep's arguments

DEFAULT_RATES = "4,8,12"


@dataclass(frozen=True)
class SweepGrid:
    """What sweep runs: its cells, the settings each starts from, the mechanism's, the policy
    options, and the grid described (as sweep.json and ``--json`` show it)."""

    cells: list
    base: WorkloadSettings
    config: SimConfig
    options: dict
    description: dict


def sweep_arguments(policies, policy_options: dict, *, rates, seeds, clusters, workload, cluster, jobs, shape,
                    throughputs, reference_gpu_type, round_s, restart_cost_s, learn_models, cpu_split, blocks,
                    privacy_policy, privacy_n, privacy_t, privacy_timeout_s, workers, ray_address, out,
                    privacy_decide="arrival", privacy_rejected_portions="lost", trace_format=None) -> SweepGrid:
    """sweep's arguments checked, in the command line's order; every cluster and policy is checked
    (its inputs loaded) before any replay starts."""
    from apportion.sweep import grid

    specs = names(policies, "policies")
    if workload and rates is not None:
        raise ArgumentError("{rates} applies to the synthetic workload only: a trace has its own arrival times")
    loads = numbers(DEFAULT_RATES if rates is None else rates, "rates", float)
    if any(r <= 0 for r in loads):
        raise ArgumentError(f"{{rates}} must be positive, got {_got(rates)}")
    seed_values = seed_list(seeds)
    cluster_list = names(cluster if clusters is None else clusters, "clusters", ";")
    if workers < 0:
        raise ArgumentError(f"{{workers}} must be >= 0, got {_shown(workers)}")
    check_out(out)
    check_cpu_split(cpu_split)
    config = sim_config(round_s, restart_cost_s, learn_models, cpu_split)
    options = read_policy_options(policy_options)

    def settings_on(each: str) -> WorkloadSettings:
        return with_privacy(workload_settings(workload, each, jobs, loads[0], seed_values[0], None, None, throughputs,
                                              reference_gpu_type, shape, trace_format),
                            blocks, privacy_policy, privacy_n, privacy_t, privacy_timeout_s, privacy_decide,
                            privacy_rejected_portions)

    for each in cluster_list:
        prepare_replay(specs, options, settings_on(each), config)
    description = {"policies": specs, "rates_per_hour": loads, "seeds": seed_values, "clusters": cluster_list,
                   "jobs": jobs, "workload": str(workload) if workload else f"synthetic {shape}",
                   "ran_on": ray_address or "local", "cpu_split": cpu_split,
                   "blocks": None if blocks is None else str(blocks)}
    return SweepGrid(grid(specs, loads, seed_values, cluster_list), settings_on(cluster_list[0]), config, options,
                     description)


def run_sweep(sweep: SweepGrid, *, workers: int = 0, ray_address: str | None = None, progress=None) -> list[dict]:
    """Every cell of ``sweep``, rows in the cells' order; a failing cell is an ArgumentError."""
    from apportion.sweep import run_grid

    try:
        return run_grid(sweep.cells, sweep.base, sweep.config, workers=workers, ray_address=ray_address,
                        progress=progress, **sweep.options)
    except (ValueError, OSError) as exc:
        raise ArgumentError.plain(str(exc)) from None
