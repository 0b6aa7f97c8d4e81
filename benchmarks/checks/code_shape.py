"""The shape of the code: files and lines per package, import arrows and circles inside serve/,
the files outside its own room that name an optional resource, and the serve/ files one submit
and one round run through.

    python benchmarks/checks/code_shape.py            # a table on stdout
    python benchmarks/checks/code_shape.py --json

The figures issue "The server in rooms" gives before and after. "Files a submit passes through"
is measured, not read: one ``POST /jobs`` through the app in-process (a fake executor), with a
profiler noting every serve/ file whose code ran during the request.

"Files naming a resource" counts the files a change of that resource touches: a file counts where its
code names the resource (a name, an import, a string such as a message or a metric's help), case
aside; a comment or a docstring that names it as an example does not. The count of any mention,
comments and docstrings included, is printed beside it.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tempfile
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "apportion"
SERVE = PACKAGE / "serve"
sys.path.insert(0, str(ROOT))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Modules of apportion a file imports, resolved to the longest existing module name."""
    found = set()
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}")
                found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.startswith("apportion")}


def existing(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def serve_graph() -> dict[str, set[str]]:
    """Module -> the serve modules it imports (package __init__ files left out when they only group)."""
    files = {module_name(p): p for p in SERVE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = {existing(m, set(files)) for m in imported_modules(path)}
        graph[name] = {t for t in targets if t and t != name and t != "apportion.serve"
                       and not (files[t].name == "__init__.py" and files[t].stat().st_size < 600)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one member (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, groups, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop(); on_stack.discard(member); group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter[0]; counter[0] += 1
                stack.append(child); on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 else "(top)"


RESOURCES = {"privacy": r"privacy", "cpu cores": r"core_split|cpu_split|core_speeds", "rented instances": r"provisioner|rental"}
ROOMS = {"privacy": "privacy", "cpu cores": "cores", "rented instances": "rental"}  # each one's package under resources/


def code_of(source: str) -> str:
    """``source`` without its comments and docstrings: the code a change would touch."""
    tree = ast.parse(source)
    docstrings = {(node.body[0].value.lineno, node.body[0].value.col_offset) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}
    kept = [token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type != tokenize.COMMENT and not (token.type == tokenize.STRING and token.start in docstrings)]
    return " ".join(kept)


def resource_files(pattern: str, own_room: str | None, code_only: bool = True) -> list[str]:
    """serve/ files that name a resource (case aside) outside the resource's own package: in their code
    (``code_only``), or anywhere, comments and docstrings included."""
    found = []
    for path in sorted(SERVE.rglob("*.py")):
        rel = path.relative_to(SERVE).parts
        if own_room and len(rel) > 2 and rel[0] == "resources" and rel[1] == own_room:
            continue
        text = path.read_text()
        if re.search(pattern, code_of(text) if code_only else text, re.IGNORECASE):
            found.append("/".join(rel))
    return found


def files_run(action) -> list[str]:
    """The serve/ files whose code runs while ``action()`` does, with ``action``'s answer checked."""
    import threading

    seen = set()

    def note(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(SERVE)):
            seen.add(frame.f_code.co_filename)
    threading.setprofile(note)
    sys.setprofile(note)
    try:
        action()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return sorted(str(Path(f).relative_to(SERVE)) for f in seen)


def submit_and_round_files() -> tuple[list[str], list[str]]:
    """The serve/ files whose code runs while the app takes one submit, and while the scheduler's
    next tick decides a round and starts its attempts (two jobs, one slot, a fake executor)."""
    from fastapi.testclient import TestClient

    from apportion.executors.fake import FakeExecutor
    from apportion.policies.las import Las
    try:
        from apportion.serve.http.api import create_app
        from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
        from apportion.serve.base.slots import parse_slots
        from apportion.serve.store.state import StateStore
    except ImportError:  # the flat layout
        from apportion.serve.api import create_app
        from apportion.serve.scheduler import Scheduler, ServeConfig
        from apportion.serve.slots import parse_slots
        from apportion.serve.state import StateStore
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scheduler = Scheduler(StateStore(tmp / "state.db"), FakeExecutor(tmp), parse_slots("cpu:1"), Las(),
                              ServeConfig(state_dir=tmp, round_s=60.0, renew_wait_s=0.0))
        client = TestClient(create_app(scheduler, None))
        client.post("/jobs", json={"name": "warm", "command": "python train.py", "total_steps": 10, "user": "ann"})

        def submit():
            answer = client.post("/jobs", json={"name": "cnn", "command": "python train.py", "total_steps": 100,
                                                "user": "ann"})
            assert answer.status_code == 200, answer.text
        submitted = files_run(submit)
        ticked = files_run(scheduler.tick)
    return submitted, ticked


def measure() -> dict:
    lines = defaultdict(lambda: [0, 0])
    for path in PACKAGE.rglob("*.py"):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        lines[part][0] += 1
        lines[part][1] += len(path.read_text().splitlines())
    rooms = defaultdict(lambda: [0, 0])
    for path in SERVE.rglob("*.py"):
        rel = path.relative_to(SERVE).parts
        room = rel[0] if len(rel) > 1 else "(top)"
        rooms[room][0] += 1
        rooms[room][1] += len(path.read_text().splitlines())
    graph = serve_graph()
    room_graph = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if room_of(target) != room_of(module):
                room_graph[room_of(module)].add(room_of(target))
    passes, round_passes = submit_and_round_files()
    return {
        "packages": {k: {"files": v[0], "lines": v[1]} for k, v in sorted(lines.items())},
        "serve_rooms": {k: {"files": v[0], "lines": v[1]} for k, v in sorted(rooms.items())},
        "serve_import_arrows": sum(len(t) for t in graph.values()),
        "serve_module_circles": circles(graph),
        "serve_room_circles": circles(dict(room_graph)),
        "files_naming_resource_outside_its_room": {
            name: resource_files(pattern, ROOMS[name]) for name, pattern in RESOURCES.items()},
        "files_mentioning_resource_outside_its_room": {
            name: resource_files(pattern, ROOMS[name], code_only=False) for name, pattern in RESOURCES.items()},
        "submit_passes_through": {"files": len(passes), "which": passes},
        "round_passes_through": {"files": len(round_passes), "which": round_passes},
    }


def rooms_of(files: list[str]) -> str:
    """", in N rooms" for files named room/module.py (nothing for a flat serve/)."""
    rooms = {f.split("/")[0] for f in files if "/" in f}
    return f" in {len(rooms)} rooms" if rooms else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="the same figures (they take seconds): the test suite runs it")
    args = parser.parse_args()
    shape = measure()
    if args.json:
        print(json.dumps(shape, indent=2))
        return
    print("package        files   lines")
    for name, row in shape["packages"].items():
        print(f"{name:<14} {row['files']:>5} {row['lines']:>7}")
    print("\nserve/ room    files   lines")
    for name, row in shape["serve_rooms"].items():
        print(f"{name:<14} {row['files']:>5} {row['lines']:>7}")
    print(f"\nimport arrows between serve/ modules: {shape['serve_import_arrows']}")
    print(f"circles among serve/ modules: {len(shape['serve_module_circles'])}"
          + "".join(f"\n  {' <-> '.join(c)}" for c in shape["serve_module_circles"]))
    print(f"circles among serve/ rooms: {len(shape['serve_room_circles'])}"
          + "".join(f"\n  {' <-> '.join(c)}" for c in shape["serve_room_circles"]))
    for name, files in shape["files_naming_resource_outside_its_room"].items():
        mentions = len(shape["files_mentioning_resource_outside_its_room"][name])
        print(f"serve/ files naming {name} outside its own package: {len(files)} in code ({', '.join(files)}); "
              f"{mentions} with comments and docstrings")
    passes = shape["submit_passes_through"]
    print(f"serve/ files one submit runs through: {passes['files']}{rooms_of(passes['which'])}"
          f" ({', '.join(passes['which'])})")
    ticked = shape["round_passes_through"]
    print(f"serve/ files one round (a tick that decides and starts) runs through: {ticked['files']}"
          f"{rooms_of(ticked['which'])}"
          f" ({', '.join(ticked['which'])})")


if __name__ == "__main__":
    main()
