"""Imports point down the layers of docs/architecture.md, never up or sideways."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "apportion"

# each part of the package, and the parts it may import (docs/architecture.md, "Layers")
ALLOWED = {
    "stdio": set(),
    "core": set(),
    "runtime": set(),
    "executors": set(),
    "perf": {"core"},
    "solve": {"core", "stdio"},
    "workloads": {"core", "perf"},
    "policies": {"core", "solve"},
    "mechanism": {"core"},
    "sim": {"core", "mechanism", "policies"},
    "serve": {"core", "executors", "mechanism", "policies", "workloads", "runtime"},
    "report": {"sim"},
    "experiment": {"core", "perf", "policies", "sim", "workloads"},
    "compare": {"experiment", "sim"},
    "sweep": {"experiment", "sim", "executors"},
    "fidelity": {"core", "mechanism", "perf", "policies", "sim", "workloads", "serve", "experiment"},
    "cli": {"core", "perf", "policies", "sim", "workloads", "serve", "report", "experiment", "compare", "sweep",
            "stdio", "mechanism", "solve", "runtime", "fidelity"},
    "__main__": {"cli"},
    "__init__": set(),
}


def imports_of(path: Path) -> set[str]:
    """The parts of apportion a module imports (the first name after ``apportion.``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith("apportion."):
                found.add(name.split(".")[1])
    return found


def test_every_part_of_the_package_has_a_layer():
    parts = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert parts <= set(ALLOWED), f"give {sorted(parts - set(ALLOWED))} a layer in docs/architecture.md and here"


def test_imports_point_down_the_layers():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for imported in imports_of(path) - {part} - ALLOWED[part]:
            wrong.append(f"{path.relative_to(PACKAGE.parent)} imports apportion.{imported}")
    assert not wrong, "\n".join(wrong)
