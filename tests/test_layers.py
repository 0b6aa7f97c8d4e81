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
    "__init__": {"core", "serve", "api", "arguments"},  # `from apportion import Client`, `simulate`, ...: imported when first asked for
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


# serve/'s rooms, lowest first: each may import only the rooms its package docstring names ("May import:")
SERVE = PACKAGE / "serve"
SERVE_ROOMS = ("base", "jobs", "store", "notify", "accounts", "estimates", "resources", "attempts", "round",
               "scheduler", "views", "http", "app")
SERVE_TOP = {"__init__": set(), "client": {"accounts", "jobs"}}  # the client: what the CLI imports


def serve_rooms_allowed() -> dict[str, set[str]]:
    """Each room's "May import:" line, from its ``__init__.py``."""
    allowed = {}
    for room in SERVE_ROOMS:
        text = ast.get_docstring(ast.parse((SERVE / room / "__init__.py").read_text())) or ""
        found = re.search(r"May import: ([^.]*)\.", text)
        assert found, f"serve/{room}/__init__.py's docstring says what the room may import ('May import: ...')"
        names = found.group(1).strip()
        allowed[room] = set() if names == "nothing else in serve" else {n.strip() for n in names.split(",")}
    return allowed | SERVE_TOP


def room_of(path: Path) -> str:
    parts = path.relative_to(SERVE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def serve_imports(path: Path) -> set[str]:
    """The serve modules a file imports, as dotted names under apportion.serve."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apportion.serve."):
            found.add(node.module.removeprefix("apportion.serve."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("apportion.serve.") for a in node.names if a.name.startswith("apportion.serve."))
    return found


def test_every_serve_module_lives_in_a_room():
    loose = [p.name for p in SERVE.glob("*.py") if p.stem not in SERVE_TOP]
    assert not loose, f"serve/{loose} sit outside the rooms: give each a room (docs/architecture.md, 'serve/ in rooms')"
    rooms = {p.name for p in SERVE.iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(SERVE_ROOMS), f"rooms on disk {sorted(rooms)} differ from SERVE_ROOMS"


def test_serve_rooms_import_only_the_rooms_below_them():
    allowed = serve_rooms_allowed()
    for room, names in allowed.items():
        if room in SERVE_ROOMS:
            above = {r for r in names if r not in SERVE_ROOMS[:SERVE_ROOMS.index(room)]}
            assert not above, f"serve/{room} may import {sorted(above)}, which are not below it"
    wrong = []
    for path in sorted(SERVE.rglob("*.py")):
        room = room_of(path)
        for module in serve_imports(path):
            target = module.split(".")[0]
            if target != room and target not in allowed[room]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports apportion.serve.{module}")
    assert not wrong, "\n".join(wrong)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``apportion/sim/simulator.py`` -> ``apportion.sim.simulator``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_nodes(tree: ast.AST):
    """Every import statement of a module: at module level, inside functions, and under
    ``if TYPE_CHECKING:`` (two modules that name each other's types know each other)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def module_imports(path: Path, modules: set[str], package_root: Path = PACKAGE) -> set[str]:
    """The apportion modules ``path`` imports: ``from pkg import mod`` is ``pkg.mod`` when that is a
    module, else ``pkg`` itself (its ``__init__``); a parent package imported on the way is not counted."""
    here = module_name(path, package_root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for name in wanted:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != here:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every module of apportion -> the apportion modules it imports."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: module_imports(path, set(paths)) for name, path in paths.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of imports, as the modules along it (one per group of modules that reach each other)."""
    def path_back(start: str) -> list[str] | None:
        seen, todo = {start: None}, [start]
        while todo:
            node = todo.pop(0)
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    path = [node]
                    while seen[path[-1]] is not None:
                        path.append(seen[path[-1]])
                    return path[::-1] + [start]
                if nxt not in seen:
                    seen[nxt] = node
                    todo.append(nxt)
        return None

    circles, covered = [], set()
    for name in sorted(graph):
        if name not in covered and (path := path_back(name)):
            circles.append(path)
            covered.update(path)
    return circles


def test_no_circles_of_imports_anywhere_in_the_package():
    circles = import_circles(import_graph())
    assert not circles, "modules on a circle of imports:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_a_circle_of_imports_is_found_and_named():
    graph = {"apportion.a": {"apportion.b"}, "apportion.b": {"apportion.c"}, "apportion.c": {"apportion.a"},
             "apportion.d": {"apportion.a"}}
    assert import_circles(graph) == [["apportion.a", "apportion.b", "apportion.c", "apportion.a"]]


def test_an_import_inside_a_function_or_only_for_types_counts(tmp_path):
    package = tmp_path / "apportion"
    (package / "sim").mkdir(parents=True)
    for name in ("__init__.py", "sim/__init__.py"):
        (package / name).write_text("")
    (package / "sim" / "simulator.py").write_text("def run():\n    from apportion.sim.elastic import Elastic\n")
    (package / "sim" / "elastic.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from apportion.sim import simulator\n")
    modules = {"apportion", "apportion.sim", "apportion.sim.simulator", "apportion.sim.elastic"}
    assert module_imports(package / "sim" / "simulator.py", modules, package) == {"apportion.sim.elastic"}
    assert module_imports(package / "sim" / "elastic.py", modules, package) == {"apportion.sim.simulator"}


def test_the_version_is_the_one_pyproject_gives():
    import tomllib

    from apportion.core.version import VERSION
    assert VERSION == tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["version"]


# the scheduler's insides: what the HTTP edge and the operators' views read through `scheduler.views` instead
SCHEDULER_INSIDES = ("store", "state", "executor", "rental", "requests", "durations")


def reaches_into_the_scheduler(path: Path) -> list[str]:
    """Each ``<...>scheduler.<inside>`` a module reads: ``scheduler.store``, ``self.scheduler.executor``;
    but for the state file handed to the app's Authenticator (the credentials it holds), once."""
    tree = ast.parse(path.read_text())
    wiring = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and getattr(node.func, "id", None) == "Authenticator" for arg in node.args}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SCHEDULER_INSIDES and id(node) not in wiring:
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.endswith("scheduler"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} reads {name}.{node.attr}")
    return found


def test_the_api_and_the_views_read_the_scheduler_through_its_views():
    wrong = [hit for room in ("http", "views") for path in sorted((SERVE / room).rglob("*.py"))
             for hit in reaches_into_the_scheduler(path)]
    assert not wrong, "read these through scheduler.views (serve/scheduler/views.py):\n" + "\n".join(wrong)
