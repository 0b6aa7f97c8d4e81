"""Executors from outside apportion: ``apportion serve --executor NAME`` (an entry point of the
``apportion.executors`` group) or ``--executor path/to/file.py:Name``.

The plugin names a class or factory called as ``factory(state_dir=Path, slots=[Slot, ...])`` that
returns an object with the ``Executor`` protocol's methods (``executors/base.py``); the server then
uses it as it uses the local one, on the slots ``--slots`` gives. ``tests/serve/test_executor_protocol.py``
is the check an implementation should pass.
"""

from __future__ import annotations

from typing import Any

from apportion.plugins import Plugin, PluginError, from_entry_point, from_file, is_file_spec

BUILT_IN = ("local", "ray")
METHODS = ("start", "poll", "is_alive", "terminate", "kill", "scan", "adopt", "kill_attempt", "exit_record", "tail",
           "log_path", "capacity", "close")


def find_executor(name: str) -> Plugin:
    """The plugin ``name`` names; ValueError naming the built-ins when nobody declares it, PluginError
    when it is not an executor class or factory."""
    plugin = from_file("executor", name) if is_file_spec(name) else from_entry_point("executor", name)
    if plugin is None:
        raise ValueError(f"unknown executor '{name}' (known: {', '.join(BUILT_IN)}, or a plugin's name)")
    if not callable(plugin.value):
        raise PluginError(f"executor plugin {plugin.name} ({plugin.source}): is a {type(plugin.value).__name__}, "
                          "not an executor class or factory")
    if isinstance(plugin.value, type):
        missing = [m for m in METHODS if not callable(getattr(plugin.value, m, None))]
        if missing:
            raise PluginError(f"executor plugin {plugin.name} ({plugin.source}): {plugin.value.__name__} has no "
                              f"{', '.join(m + '()' for m in missing)} (executors/base.py's Executor)")
    return plugin


def make_executor(name: str, **arguments: Any) -> Any:
    """The executor plugin ``name`` built with ``arguments`` (state_dir, slots); PluginError naming it."""
    plugin = find_executor(name)
    try:
        executor = plugin.value(**arguments)
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"executor plugin {plugin.name} ({plugin.source}): building it failed: "
                          f"{type(exc).__name__}: {exc}") from None
    missing = [m for m in METHODS if not callable(getattr(executor, m, None))]
    if missing:
        raise PluginError(f"executor plugin {plugin.name} ({plugin.source}): built a {type(executor).__name__}, "
                          f"which has no {', '.join(m + '()' for m in missing)}")
    return executor
