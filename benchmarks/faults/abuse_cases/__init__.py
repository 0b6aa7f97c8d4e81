"""The cases ``benchmarks/faults/abuse.py`` runs: one module each, with ``NAME``, ``ABOUT`` and ``run(args) -> rows``.

A case starts its own server (``abuse_server.Server``), does what a hostile or simply big user would,
and returns rows made by ``abuse_server.row``: a figure, its target and whether it was met.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def cases() -> dict:
    """Every case module in this folder, by its ``NAME``, in file order."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        module = importlib.import_module(f"abuse_cases.{info.name}")
        if hasattr(module, "run"):
            found[module.NAME] = module
    return found
