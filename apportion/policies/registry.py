"""Every policy apportion knows, in one declarative table, imported only when one is built.

A policy is asked for as ``NAME[:variant…]`` (``max-min-fairness:agnostic:space-sharing``)
plus keyword options. Each entry says where its class lives, what it does, whether it is an
LP (so POP ``partitions`` apply), and which options it takes, with their types and meaning;
``make_policy`` checks a request against the entry and fails with one line naming what is
wrong, before any solver is imported. The built policy's ``name`` is its full spec.

Adding a policy
---------------
1. Write one module, ``apportion/policies/my_policy.py``, with one class: a ``name``, an
   ``allocate(jobs, cluster, throughputs)`` and a ``next_change_s(jobs, running)``
   (subclass ``OrderingPolicy`` to rank jobs for whole GPUs, ``LPPolicy`` for an LP). Its
   constructor takes its options as keyword arguments.
2. Add one ``PolicyEntry`` to ``_BUILT_IN`` below: its name, ``"module:Class"``, a one-line
   summary, ``is_lp``, and its options (``AGNOSTIC`` and ``LP_OPTIONS`` are the usual ones).
   The command line, ``make_policy`` and the simulator's invariant tests (which run every
   registered policy) pick it up from there.
3. Add one test of what the policy promises, in ``tests/policies/``.

Code outside apportion may instead ``register(PolicyEntry(...))`` with the class itself, or be a
plugin (``apportion.plugins``): a name that is no registered policy's is looked up, when first asked
for, as a file spec (``path/to/file.py:Name``) or an entry point of the ``apportion.policies`` group
(``policies/plugin_policies.py``), and registered under that name.

Options on the command line
---------------------------
Every option declared here is a flag of ``apportion simulate``, ``compare``, ``sweep`` and
``serve`` (``cli.options.PolicyCommand``), listed under "Policy options" in their ``--help``
(``serve --help-policy-options``), and a key of a server config file (``serve/app/settings_file.py``):
spelled ``cli_flag``, with its ``help`` (after the names of the policies that take it, or its
``applies_to``, unless every policy does), its ``metavar`` and its default. A ``bool`` is a
bare flag (``--goodput-exact``; ``--x/--no-x`` if its default is True); an ``int``, ``float``
or ``str`` is typed as such; any other type is given as text that its ``check`` turns into the
value (``--las-thresholds 3600,36000``), or, for a ``QueueConfig``, as the path of a file the
command reads. Only the options a user gives reach ``make_policy``, which checks them as above:
one given to a policy that does not take it is an error unless it is ``shared`` (a comparison
gives it once), and then it is an error only when no policy given takes it. An option with
``command_line=False`` is left off (``restart_cost_s``: the commands pass the mechanism's). An
option has one meaning wherever it is declared: ``register`` refuses a policy that declares one
otherwise, or spells one like another.
"""

from __future__ import annotations

import difflib
from collections.abc import Set
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping
from types import MappingProxyType

from apportion.core.queues import Queue, QueueConfig
from apportion.policies.entry import Option, PolicyEntry

if TYPE_CHECKING:
    from apportion.policies.base import Policy


def _positive_numbers(value: Any) -> tuple[float, ...]:
    """``"3600,36000"`` or a sequence of numbers → a tuple of positive floats."""
    text = value if isinstance(value, str) else ",".join(str(v) for v in value)
    try:
        numbers = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"must be GPU-seconds separated by commas, got '{text}'") from None
    if not numbers or min(numbers) <= 0:
        raise ValueError(f"must be positive GPU-seconds, got '{text}'")
    return numbers


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got '{value}'")
        return value
    return check


def _non_negative(value: Any) -> float:
    if not float(value) >= 0:
        raise ValueError(f"must be >= 0, got {value}")
    return float(value)


def _at_least_one(value: Any) -> int:
    if int(value) != value or value < 1:
        raise ValueError(f"must be a whole number >= 1, got {value}")
    return int(value)


def _at_most_one(value: Any) -> float:
    if not float(value) <= 1:
        raise ValueError(f"must be a number <= 1, got {value}")
    return float(value)


def _one_queue() -> QueueConfig:
    return QueueConfig((Queue("default"),), source="<example>")


AGNOSTIC = Option("agnostic", bool, "treat every GPU type as equally fast (time shares only)", False, variant=True)
SPACE_SHARING = Option("space_sharing", bool, "let two one-GPU jobs share a GPU where their pair's speed is known",
                       False, variant=True)
PARTITIONS = Option("partitions", int, "solve as K random sub-problems (POP), for speed on large clusters", 1,
                    metavar="K", applies_to="LP policies", check=_at_least_one)
LP_OPTIONS = (AGNOSTIC, SPACE_SHARING, PARTITIONS)
RESTART_COST = Option("restart_cost_s", float, "seconds a move costs: a running job moves to a faster free type "
                      "only when it saves more (run_policy passes the mechanism's)", 10.0, shared=True,
                      check=_non_negative, command_line=False)
ORDERING_OPTIONS = (AGNOSTIC, RESTART_COST)
DURATIONS = Option("durations", str, "what remaining durations the policy knows: oracle (the true ones; srtf's and "
                   "finish-time-fairness's default) or predicted (from the history of finished jobs; qssf's default)",
                   metavar="predicted|oracle", shared=True, check=_one_of("predicted", "oracle"))

HEAD_OF_LINE = Option("head_of_line", bool, "a strict queue, as Helios's: no waiting job starts behind one that "
                      "cannot start yet", False, variant=True)

_BUILT_IN = (
    PolicyEntry("fifo", "apportion.policies.fifo:Fifo", "non-preemptive, in submission order",
                options=ORDERING_OPTIONS + (Option("preemptive", bool, "Synergy's FIFO: each round decided afresh in "
                                                   "submission order, an earlier job that now fits preempting later "
                                                   "ones (default: a started job runs to the end)", False,
                                                   variant=True), HEAD_OF_LINE)),
    PolicyEntry("srtf", "apportion.policies.srtf:Srtf",
                "shortest remaining time, at each job's fastest speed (at its share of CPU cores where they limit it)",
                options=ORDERING_OPTIONS + (DURATIONS,)),
    PolicyEntry("las", "apportion.policies.las:Las", "Tiresias' least attained service, in discrete queues",
                options=ORDERING_OPTIONS + (Option("thresholds_gpu_s", tuple, "queue thresholds in GPU-seconds "
                                          "(default 3600,36000)", flag="--las-thresholds", metavar="S,S,…",
                                          check=_positive_numbers),
                                   Option("continuous", bool, "Synergy's LAS: ranked by attained GPU-seconds "
                                          "themselves, re-ranked as they grow (default: Tiresias' queues)", False,
                                          variant=True, excludes=("thresholds_gpu_s",)))),
    PolicyEntry("qssf", "apportion.policies.qssf:Qssf", "Helios' quasi-shortest-service-first: the least predicted "
                "remaining GPU time first (the Gittins index over each job's group's recent jobs), preemptive", options=ORDERING_OPTIONS + (DURATIONS, HEAD_OF_LINE, Option(
                    "non_preemptive", bool, "a started job runs to its end (Helios's QSSF); only waiting jobs are "
                    "ranked", False, variant=True), Option(
                    "median_left", bool, "predicted: rank by the median GPU time left alone (default: by the "
                    "Gittins index of the prediction's spread, least attained service first where it is wide)",
                    False, variant=True), Option(
                    "lognormal", bool, "predicted: rank by the Gittins index of the lognormal prediction (default: "
                    "over the job's group's recent finished jobs where it has 20 or more)", False, variant=True,
                    excludes=("estimate_ratios",)), Option(
                    "estimate_ratios", bool, "predicted: rank a job with its own estimate by it × the Gittins index "
                    "over recent finished jobs' actual ÷ estimate, once 20 (default: by its corrected lognormal)",
                    False, variant=True, excludes=("median_left", "non_preemptive")))),
    PolicyEntry("max-min-fairness", "apportion.policies.max_min_fairness:MaxMinFairness",
                "Gavel's max-min fairness over normalised throughput", is_lp=True,
                options=LP_OPTIONS + (Option("water_filling", bool, "raise jobs level by level, so none can rise "
                                             "without lowering a smaller one (slower)", False,
                                             excludes=("space_sharing",)),
                                      Option("share_by", str, "what is made equal: gpu-time (Gavel's: normalised "
                                             "throughput × GPUs) or rate (normalised throughput alone)", "gpu-time",
                                             metavar="gpu-time|rate", shared=True,
                                             check=_one_of("gpu-time", "rate")))),
    PolicyEntry("finish-time-fairness", "apportion.policies.finish_time_fairness:FinishTimeFairness",
                "Themis' finish-time fairness: the smallest worst ratio to an isolated share", is_lp=True,
                options=LP_OPTIONS + (DURATIONS,)),
    PolicyEntry("min-makespan", "apportion.policies.min_makespan:MinMakespan",
                "finish the current jobs as early as possible", is_lp=True, options=LP_OPTIONS),
    PolicyEntry("max-throughput", "apportion.policies.max_throughput:MaxThroughput",
                "most total normalised throughput", is_lp=True, options=LP_OPTIONS),
    PolicyEntry("min-cost", "apportion.policies.min_cost:MinCost", "most normalised throughput per dollar",
                is_lp=True, options=LP_OPTIONS + (Option("slo", bool, "honour the workload's deadlines (its "
                                                         "deadline_s column)", False, excludes=("space_sharing",)),)),
    PolicyEntry("hierarchical", "apportion.policies.hierarchical:Hierarchical",
                "fairness across Kueue-style queues, then inside each queue",
                options=(AGNOSTIC, Option("queues", QueueConfig, "a queues YAML, see docs/queues.md", required=True,
                                          metavar="FILE", shared=True, example=_one_queue))),
    PolicyEntry("goodput", "apportion.policies.goodput:Goodput",
                "Pollux/Sia: each job's GPU type, count and batch size for the best generalised mean of speedups",
                options=(AGNOSTIC, RESTART_COST,
                         Option("p", float, "the generalised mean's exponent: -1 (Pollux's) is fairer, 1 is total "
                                "speedup", -1.0, flag="--goodput-p", metavar="P", check=_at_most_one),
                         Option("exact", bool, "solve the MILP to optimality instead of rounding its LP "
                                "relaxation (slower; the relaxation's bound is reported either way)", False,
                                flag="--goodput-exact"))),
    PolicyEntry("optimus", "apportion.policies.optimus:Optimus",
                "Optimus: GPUs one at a time to the job whose remaining time falls most; batch sizes fixed",
                options=(AGNOSTIC, RESTART_COST)),
)

_ENTRIES: dict[str, PolicyEntry] = {entry.name: entry for entry in _BUILT_IN}
ENTRIES: Mapping[str, PolicyEntry] = MappingProxyType(_ENTRIES)  # name -> entry, registered ones included


class _Names(Set):
    """The names of the registered policies that pass ``keep``, always up to date."""

    def __init__(self, keep: Callable[[PolicyEntry], bool]) -> None:
        self._keep = keep

    def __iter__(self) -> Iterator[str]:
        return (name for name, entry in _ENTRIES.items() if self._keep(entry))

    def __contains__(self, name: object) -> bool:
        return name in _ENTRIES and self._keep(_ENTRIES[name])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{{{', '.join(repr(n) for n in self)}}}"


LP_NAMES: Set[str] = _Names(lambda entry: entry.is_lp)


def register(entry: PolicyEntry) -> PolicyEntry:
    """Add a policy; ValueError if its name is taken, or if one of its options is declared otherwise
    by another policy or spelled like another option (each option is one flag, with one meaning)."""
    if entry.name in _ENTRIES:
        raise ValueError(f"policy '{entry.name}' is already registered")
    for option in entry.options:
        for other in declared_options():
            if other.name == option.name and other != option:
                raise ValueError(f"policy '{entry.name}': option '{option.name}' differs from the one "
                                 f"{', '.join(option_takers(other.name))} declare")
            if other.name != option.name and other.cli_flag == option.cli_flag:
                raise ValueError(f"policy '{entry.name}': option '{option.name}' is spelled {option.cli_flag}, "
                                 f"like option '{other.name}' of {', '.join(option_takers(other.name))}")
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a policy added with ``register``."""
    _ENTRIES.pop(name)


def policy_names() -> tuple[str, ...]:
    """Every registered policy's name, built-in ones first, in the table's order."""
    return tuple(_ENTRIES)


def policy_info(name: str) -> PolicyEntry:
    """The entry of the policy ``name`` (variants in a spec are ignored); ValueError if unknown."""
    base = base_name(name)
    _find(base, name)
    return _ENTRIES[base]


def base_name(spec: str) -> str:
    """The policy's name in ``spec``: before its variants (a plugin file's ``path.py:Name`` whole)."""
    from apportion.plugins import is_file_spec, split_file_spec

    spec = spec.strip()
    if ".py:" in spec and is_file_spec(spec):
        return split_file_spec(spec)[0]
    return spec.split(":")[0].strip()


def _find(name: str, spec: str) -> None:
    """Make sure ``name`` is registered: a plugin (file spec, entry point) is loaded and registered
    now; ValueError naming the known policies when nobody declares it, PluginError when it is broken."""
    if name in _ENTRIES:
        return
    from apportion.policies.plugin_policies import load

    if load(name, register, PARTITIONS) is None:
        raise ValueError(_unknown("policy", name, _ENTRIES, spec.strip()))


def discover_plugins(warn: Callable[[str], None]) -> None:
    """Register every policy entry point that loads and is well formed; warn of and skip the others."""
    from apportion.policies.plugin_policies import discover_all

    discover_all(warn, ENTRIES, register, PARTITIONS)


def _unknown(what: str, name: str, known, spec: str = "") -> str:
    """The one-line error for a name nobody registered (in ``spec``): the close ones, then every known one."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    where = f" in '{spec}'" if spec and spec != name else ""
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {what} '{name}'{where}{hint} (known: {', '.join(known)})"


def variant_names() -> tuple[str, ...]:
    """Every variant some registered policy accepts, in the table's order."""
    seen = dict.fromkeys(v for entry in _ENTRIES.values() for v in entry.variants)
    return tuple(seen)


def declared_options() -> tuple[Option, ...]:
    """Every option some registered policy takes, once each, in the table's order."""
    first: dict[str, Option] = {}
    for entry in _ENTRIES.values():
        for option in entry.options:
            first.setdefault(option.name, option)
    return tuple(first.values())


def option_takers(option_name: str) -> tuple[str, ...]:
    """The registered policies that take the option ``option_name``, in the table's order."""
    return tuple(name for name, entry in _ENTRIES.items() if entry.option(option_name))


def parse_spec(spec: str) -> tuple[str, dict[str, bool]]:
    """``max-min-fairness:agnostic`` → ("max-min-fairness", {"agnostic": True}); variants combine
    (a plugin file's ``path.py:Name:agnostic`` → ("path.py:Name", {"agnostic": True}))."""
    name = base_name(spec)
    variants = [part.strip() for part in spec.strip()[len(name):].split(":")[1:]]
    known = variant_names()
    options = {}
    for variant in variants:
        if variant not in known:
            raise ValueError(_unknown("policy variant", f":{variant}", [":" + v for v in known], spec.strip()))
        options[variant.replace("-", "_")] = True
    return name, options


def make_policy(spec: str, **options: Any) -> Policy:
    """A fresh policy from ``NAME[:variant…]`` and its keyword options (variants win over them).

    An option left at its default is not asked for; a ``shared`` option is ignored by a policy
    that does not take it. ValueError, one line, for anything that does not apply.
    """
    _find(base_name(spec), spec)
    name, variant_options = parse_spec(spec)
    entry = _ENTRIES[name]
    given = _check_options(entry, {**options, **variant_options})
    partitions = given.pop("partitions", 1)
    factory = entry.load()
    if partitions > 1:
        from apportion.policies.partitioned import Partitioned

        policy = Partitioned(lambda: factory(**given), partitions)
    else:
        policy = factory(**given)
    policy.name = ":".join([entry.name] + [o.variant_name for o in entry.options if o.variant and given.get(o.name)])
    return policy


def check_specs(specs: list[str], **options: Any) -> None:
    """Build each spec once with ``options``, and refuse a shared option that none of them takes."""
    entries = []
    for spec in specs:
        make_policy(spec, **options)
        entries.append(policy_info(spec))
    for option_name, value in options.items():
        option = _declared(option_name)
        if option.shared and not _left_at_default(value, option) and not any(
            e.option(option_name) for e in entries
        ):
            raise ValueError(f"{option.cli_flag} applies to {_takers(option_name)} only")


def _declared(option_name: str) -> Option:
    """The option called ``option_name`` as some registered policy declares it."""
    declared = {option.name: option for option in declared_options()}
    if option_name not in declared:
        raise ValueError(_unknown("policy option", option_name, declared))
    return declared[option_name]


def _left_at_default(value: Any, option: Option) -> bool:
    """Whether ``value`` asks for nothing: None, or a plain value equal to the default (False, 1)."""
    return value is None or (isinstance(value, (bool, int, float, str)) and value == option.default)


def _takers(option_name: str) -> str:
    return ", ".join(sorted(option_takers(option_name)))


def _check_options(entry: PolicyEntry, options: dict[str, Any]) -> dict[str, Any]:
    """The options asked for, checked against ``entry`` and converted; ValueError naming the first wrong one."""
    given = {}
    for option_name, value in options.items():
        declared = _declared(option_name)
        if _left_at_default(value, declared):
            continue
        option = entry.option(option_name)
        if option is None:
            if declared.shared:
                continue
            takers = _takers(option_name)
            if "," not in takers:
                takers += " only"
            elif declared.applies_to:
                takers = f"{declared.applies_to} ({takers})"
            raise ValueError(f"{declared.cli_flag} applies to {takers}, not to '{entry.name}'")
        if option.check is not None:
            try:
                value = option.check(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{option.cli_flag} {exc}") from None
        elif option.type is bool:
            value = bool(value)
        given[option_name] = value
    for option in entry.options:
        if option.required and option.name not in given:
            raise ValueError(f"{entry.name} needs {option.cli_flag} {option.metavar} ({option.help})")
        for other in option.excludes:
            if option.name in given and other in given:
                raise ValueError(f"{option.cli_flag} cannot be combined with {entry.option(other).cli_flag}")
    return given


__all__ = [
    "AGNOSTIC",
    "ENTRIES",
    "base_name",
    "LP_NAMES",
    "LP_OPTIONS",
    "Option",
    "PolicyEntry",
    "check_specs",
    "declared_options",
    "make_policy",
    "option_takers",
    "parse_spec",
    "policy_info",
    "policy_names",
    "register",
    "unregister",
    "variant_names",
]
