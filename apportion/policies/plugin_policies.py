"""Policies from outside apportion (entry points, ``file.py:Name``) made into registry entries.

A plugin names either a ``PolicyEntry`` or a policy class (``apportion.policies.api``). It is
checked once when loaded (a class with ``allocate`` and ``next_change_s``, options that are
``Option``s, an API version this apportion has) and registered under the name it was asked
for. Every policy it builds answers through ``checked``: an answer that is not a well-formed
``Allocation`` for the round's jobs, or an exception, is a ``PluginError`` naming the plugin,
never a traceback from inside the round.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MethodType
from typing import Any, Callable, Mapping

import numpy as np

from apportion.plugins import Plugin, PluginError, discover, from_entry_point, from_file, is_file_spec
from apportion.policies.entry import POLICY_API_VERSION, Option, PolicyEntry

Register = Callable[[PolicyEntry], PolicyEntry]  # the registry's ``register``, passed in: it imports this module


def load(name: str, register: Register, partitions: Option) -> PolicyEntry | None:
    """The entry for ``name`` (a file spec or an entry point's name), registered now; None when no
    package declares it; PluginError when it cannot be used. ``partitions``: the option every LP takes."""
    plugin = from_file("policy", name) if is_file_spec(name) else from_entry_point("policy", name)
    return None if plugin is None else _register(plugin, register, partitions)


def discover_all(warn: Callable[[str], None], entries: Mapping[str, PolicyEntry], register: Register,
                 partitions: Option) -> None:
    """Register every policy entry point that loads and is well formed; warn of and skip the others."""
    for plugin in discover("policy", lambda name: name in entries and entries[name].source == "built-in", warn):
        if plugin.name in entries:
            continue
        try:
            _register(plugin, register, partitions)
        except PluginError as exc:
            warn(f"{exc} (skipped)")


def _register(plugin: Plugin, register: Register, partitions: Option) -> PolicyEntry:
    entry = entry_of(plugin, partitions)
    try:
        return register(entry)
    except ValueError as exc:
        raise PluginError(f"policy plugin {plugin.name} ({plugin.source}): {exc}") from None


def entry_of(plugin: Plugin, partitions: Option) -> PolicyEntry:
    """``plugin``'s value as a registry entry under its name; PluginError naming what is wrong."""
    where = f"policy plugin {plugin.name} ({plugin.source})"
    value = plugin.value
    factory = value.load() if isinstance(value, PolicyEntry) else value
    if not isinstance(factory, type) and not callable(factory):
        raise PluginError(f"{where}: is a {type(value).__name__}, not a policy class or a PolicyEntry")
    for method in ("allocate", "next_change_s"):
        if isinstance(factory, type) and not callable(getattr(factory, method, None)):
            raise PluginError(f"{where}: {factory.__name__} has no {method}() (see apportion.policies.api)")
    needs = getattr(value, "requires_api", getattr(factory, "requires_api", 1))
    if not isinstance(needs, int) or needs > POLICY_API_VERSION:
        raise PluginError(f"{where}: needs policy API {needs}, this apportion has {POLICY_API_VERSION} "
                          "(upgrade apportion)")
    if isinstance(value, PolicyEntry):
        entry = replace(value, name=plugin.name)
    else:
        options = getattr(factory, "options", ())
        if not isinstance(options, (tuple, list)) or not all(isinstance(o, Option) for o in options):
            raise PluginError(f"{where}: options must be a tuple of apportion.policies.api.Option")
        summary = getattr(factory, "summary", None) or (factory.__doc__ or "").strip().split("\n")[0] or "(no summary)"
        is_lp = bool(getattr(factory, "is_lp", _is_lp(factory)))
        if is_lp and not any(o.name == partitions.name for o in options):
            options = (*options, partitions)  # an LP may be split into POP's sub-problems
        entry = PolicyEntry(plugin.name, factory, str(summary), is_lp=is_lp, options=tuple(options))
    return replace(entry, target=_checked_factory(entry.load(), plugin.name), source=plugin.source)


def _is_lp(factory: Any) -> bool:
    """Whether ``factory`` is an LPPolicy, without importing the solver to ask."""
    return any(c.__name__ == "LPPolicy" and c.__module__ == "apportion.policies.lp"
               for c in getattr(factory, "__mro__", ()))


def _checked_factory(factory: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``factory`` whose policies answer through ``checked``; a constructor's error names the plugin."""
    def build(**options: Any) -> Any:
        try:
            policy = factory(**options)
        except Exception as exc:  # noqa: BLE001 - the plugin's own code
            raise PluginError(f"policy plugin {name}: building it failed: {_said(exc)}") from None
        for method in ("allocate", "next_change_s"):
            if not callable(getattr(policy, method, None)):
                raise PluginError(f"policy plugin {name}: built a {type(policy).__name__}, which has no {method}()")
        policy.name = name  # make_policy adds its variants; POP's sub-policies keep this
        return checked(policy, name)

    build.__name__ = getattr(factory, "__name__", "build")
    build.plugin_class = factory  # what apportion policies reads: elastic, space sharing
    return build


def checked(policy: Any, name: str) -> Any:
    """``policy`` with its answers checked: a PluginError naming ``name`` for anything malformed.

    The checks are methods bound to the policy (``types.MethodType``), so that a deep copy of it (one
    per user, ``by_user.py``) checks its own answers, not the original's."""
    policy._apportion_plugin = name
    policy.allocate = MethodType(_checked_allocate, policy)
    policy.next_change_s = MethodType(_checked_next_change_s, policy)
    return policy


def _checked_allocate(policy, jobs, cluster, throughputs):
    name = policy._apportion_plugin
    try:
        answer = type(policy).allocate(policy, jobs, cluster, throughputs)
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"policy plugin {name}: allocate() raised {_said(exc)}") from None
    problem = malformed(answer, jobs, cluster)
    if problem:
        raise PluginError(f"policy plugin {name}: allocate() returned {problem}")
    return answer


def _checked_next_change_s(policy, jobs, running):
    name = policy._apportion_plugin
    try:
        answer = type(policy).next_change_s(policy, jobs, running)
        seconds = float(answer)
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"policy plugin {name}: next_change_s() raised {_said(exc)}") from None
    if math.isnan(seconds) or seconds < 0:
        raise PluginError(f"policy plugin {name}: next_change_s() returned {answer!r}, not seconds >= 0 (or inf)")
    return seconds


def malformed(answer: Any, jobs, cluster) -> str:
    """What is wrong with ``answer`` as the allocation for ``jobs`` on ``cluster``; "" when nothing is."""
    from apportion.core.allocation import Allocation

    if not isinstance(answer, Allocation):
        return f"a {type(answer).__name__}, not an Allocation"
    shape = (len(jobs.index), len(cluster.gpu_types))
    share = np.asarray(answer.share)
    if share.shape != shape:
        return f"shares of shape {share.shape}, not {shape} (jobs × GPU types)"
    if not np.array_equal(np.asarray(answer.job_index), jobs.index):
        return "an allocation whose job_index is not jobs.index"
    if share.size and not np.isfinite(share).all():
        return "shares that are not finite numbers"
    if share.size and share.min() < -1e-9:
        return f"a negative share ({share.min():g})"
    total = answer.time_fraction()
    if total.size and total.max() > 1 + 1e-6:
        return f"a job whose shares sum to {total.max():g}, more than 1"
    return ""


def _said(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
