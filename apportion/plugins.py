"""Code from outside apportion, found by name: entry points of installed packages, or a file path.

Five kinds of piece may come from outside: a policy, a provisioning policy, a privacy policy, a
workload reader and an executor. Each kind is one entry-point group (``KINDS``): a package says
``[project.entry-points."apportion.policies"] my-policy = "my_package.module:MyPolicy"``. For a
quick experiment, ``path/to/file.py:Name`` names ``Name`` in that file wherever a built-in's name
is given (``--policy my_policy.py:MyPolicy``).

Nothing here runs until a name that is not a built-in is asked for, or every plugin is listed:
``importlib.metadata`` is imported then, so that commands that name built-ins start as fast as
before. What goes wrong is a ``PluginError`` (a ValueError), one line naming the plugin and what
is wrong; the commands print it and exit 2.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# kind -> its entry-point group
KINDS = {
    "policy": "apportion.policies",
    "provisioning": "apportion.provisioning",
    "privacy": "apportion.privacy",
    "workload": "apportion.workloads",
    "executor": "apportion.executors",
}
_FILE_SPEC = re.compile(r"^(?P<path>[^:]*\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<rest>(:.*)?)$")
_FILES: dict[Path, Any] = {}  # a plugin file's resolved path -> its module, each file run once


class PluginError(ValueError):
    """A plugin that cannot be used: the message names the plugin and what is wrong, in one line."""


@dataclass(frozen=True)
class Plugin:
    """One piece from outside: the name it is asked for by, the object it names, where it came from."""

    kind: str
    name: str  # the entry point's name, or the file spec (path.py:Name) as given
    value: Any
    source: str  # "entry point of PACKAGE VERSION" or "file PATH"


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names an object in a Python file: ``path/to/file.py:Name[:more]``."""
    return _FILE_SPEC.match(spec.strip()) is not None


def split_file_spec(spec: str) -> tuple[str, str]:
    """``path/file.py:Name:agnostic`` → (``path/file.py:Name``, ``:agnostic``): the file spec and what follows."""
    match = _FILE_SPEC.match(spec.strip())
    if match is None:
        raise PluginError(f"'{spec}' is not a plugin file spec (path/to/file.py:Name)")
    return f"{match['path']}:{match['name']}", match["rest"]


def from_file(kind: str, spec: str) -> Plugin:
    """The object ``path.py:Name`` names, the file run as a module once per process."""
    file_spec, _ = split_file_spec(spec)
    path_text, _, name = file_spec.rpartition(":")
    path = Path(path_text).expanduser()
    where = f"{kind} plugin {file_spec}"
    if not path.is_file():
        raise PluginError(f"{where}: no such file {path_text}")
    resolved = path.resolve()
    module = _FILES.get(resolved)
    if module is None:
        module_name = "apportion_plugin_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
        try:
            loader_spec = importlib.util.spec_from_file_location(module_name, resolved)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # dataclasses and pickling look their module up here
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - whatever the file raises is the plugin's fault
            sys.modules.pop(module_name, None)
            raise PluginError(f"{where}: failed to import: {_said(exc)}") from None
        _FILES[resolved] = module
    if not hasattr(module, name):
        raise PluginError(f"{where}: {path_text} has no '{name}'")
    return Plugin(kind, file_spec, getattr(module, name), f"file {path_text}")


def entry_points_of(kind: str) -> list:
    """The entry points of ``kind``'s group in the installed packages (importlib.metadata imported now)."""
    from importlib.metadata import entry_points

    return list(entry_points(group=KINDS[kind]))


def from_entry_point(kind: str, name: str) -> Plugin | None:
    """The object the entry point ``name`` of ``kind`` names, None if no package declares one;
    PluginError if two packages declare it or it fails to load."""
    found = [ep for ep in entry_points_of(kind) if ep.name == name]
    if not found:
        return None
    if len({(_package(ep), ep.value) for ep in found}) > 1:
        raise PluginError(f"{kind} plugin '{name}': declared by several packages "
                          f"({', '.join(_package(ep) for ep in found)}); uninstall all but one")
    return _load(kind, found[0])


def discover(kind: str, taken: Callable[[str], bool], warn: Callable[[str], None]) -> list[Plugin]:
    """Every entry point of ``kind`` that loads, for a listing; each one that does not, or whose name
    ``taken`` (a built-in's, another package's) is skipped with one line to ``warn``."""
    plugins, counts = [], {}
    points = entry_points_of(kind)
    for ep in points:
        counts[ep.name] = counts.get(ep.name, 0) + 1
    for ep in points:
        if taken(ep.name):
            warn(f"{kind} plugin '{ep.name}' of {_package(ep)} skipped: the name is a built-in's")
            continue
        if counts[ep.name] > 1:
            warn(f"{kind} plugin '{ep.name}' of {_package(ep)} skipped: several packages declare it")
            continue
        try:
            plugins.append(_load(kind, ep))
        except PluginError as exc:
            warn(f"{exc} (skipped)")
    return plugins


def _load(kind: str, ep) -> Plugin:
    try:
        value = ep.load()
    except Exception as exc:  # noqa: BLE001 - whatever the package raises is the plugin's fault
        raise PluginError(f"{kind} plugin '{ep.name}' of {_package(ep)} ({ep.value}): failed to import: "
                          f"{_said(exc)}") from None
    return Plugin(kind, ep.name, value, f"entry point of {_package(ep)}")


def _package(ep) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an unnamed package"


def _said(exc: BaseException) -> str:
    """An exception as one line: its type and its first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


__all__ = ["KINDS", "Plugin", "PluginError", "discover", "from_entry_point", "from_file", "is_file_spec",
           "split_file_spec"]
