"""Imports point down the layers of docs/architecture.md, never up or sideways."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "apportion"

# each part of the package, and the parts it may import (docs/architecture.md, "Layers")
ALLOWED = {
    "stdio": set(),
    "plugins": set(),
    "core": set(),
    "runtime": set(),
    "executors": {"plugins"},
    "perf": {"core"},
    "solve": {"core", "stdio"},
    "workloads": {"core", "perf", "plugins"},
    "policies": {"core", "solve", "plugins"},
    "mechanism": {"core", "plugins"},
    "sim": {"core", "mechanism", "policies"},
    "serve": {"core", "executors", "mechanism", "policies", "workloads", "runtime"},
    "report": {"sim"},
    "experiment": {"core", "perf", "policies", "sim", "workloads"},
    "arguments": {"core", "mechanism", "policies", "sim", "workloads", "experiment", "compare", "sweep"},
    "compare": {"experiment", "sim"},
    "sweep": {"experiment", "sim", "executors"},
    "fidelity": {"core", "mechanism", "perf", "policies", "sim", "workloads", "serve", "experiment"},
    "cli": {"core", "perf", "policies", "sim", "workloads", "serve", "report", "experiment", "compare", "sweep",
            "stdio", "mechanism", "solve", "runtime", "fidelity", "plugins", "arguments"},
    "__main__": {"cli"},
    "results": {"sim", "report", "sweep"},
    "api": {"arguments", "results", "report", "sweep", "workloads"},
    "__init__": {"serve", "api", "arguments"},  # `from apportion import Client`, `simulate`, ...: imported when first asked for
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


def documented_layers() -> dict[str, set[str]]:
    """The "Layers" table of docs/architecture.md: each part (a row may name two) and what it may import."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        allowed = re.sub(r"\([^)]*\)", "", cells[2])
        imports = set() if allowed.strip() in ("—", "") else {a.strip() for a in allowed.split(",")}
        for name in re.findall(r"`([^`]+)`", cells[0]):
            layers[name.removesuffix("/").removesuffix(".py")] = imports
    return layers


def test_the_architecture_doc_gives_each_part_the_imports_the_code_is_held_to():
    documented = documented_layers()
    undocumented = set(ALLOWED) - set(documented) - {"__main__", "__init__"}
    assert not undocumented, f"docs/architecture.md's Layers table leaves out {sorted(undocumented)}"
    differ = {part: (sorted(imports), sorted(ALLOWED[part])) for part, imports in documented.items()
              if imports != {"everything above"} and imports != ALLOWED[part]}
    assert not differ, f"docs/architecture.md says (doc, test): {differ}"
