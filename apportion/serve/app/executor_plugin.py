"""The executor ``apportion serve --executor`` names when it is a plugin (executors/plugin_executors.py)."""

from __future__ import annotations

from pathlib import Path

from apportion.executors.plugin_executors import make_executor


def plugin_executor(name: str, state_dir: Path, slots: list):
    """None for the local executor (the server builds its own), else the plugin ``name`` built for
    ``slots``; ValueError (a PluginError) naming the plugin when it cannot be built."""
    if name == "local":
        return None
    return make_executor(name, state_dir=Path(state_dir).expanduser(), slots=list(slots))
