"""The README's example outputs are what the commands print today.

Every fenced block of README.md that shows ``$ apportion ...`` followed by its output is found;
each command that is fast and deterministic is run again (in a fresh directory, into a pipe, as
a reader would copy it) and its output compared with the README's, ignoring wall-clock figures
(the ``sim wall time`` row) and column widths. A test per command, named by its README line,
so a change to a default points at exactly the block that moved; its failure shows the diff and
the fresh output to paste. ``python tests/test_readme.py`` prints every block that moved.

Commands not run, and why, are in ``why_not_run``.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RUNNABLE = ("simulate", "compare", "sweep", "kinds", "plan")  # synthetic or built-in inputs, seconds each


@dataclass(frozen=True)
class Example:
    line: int  # 1-based line of the command in README.md
    command: str  # after "$ ", continuation lines joined
    output: str  # the lines the README shows under it

    @property
    def name(self) -> str:
        return f"README.md:{self.line} {self.command[:70]}"


def examples(text: str) -> list[Example]:
    """Each ``$ apportion ...`` command of a fenced block, with the output shown under it."""
    found: list[Example] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        block, start = lines[i + 1:end], i + 2
        k = 0
        while k < len(block):
            if not block[k].startswith("$ "):
                k += 1
                continue
            line, command = start + k, block[k][2:]
            while command.endswith("\\") and k + 1 < len(block):
                k += 1
                command = command[:-1].rstrip() + " " + block[k].strip()
            k += 1
            output = []
            while k < len(block) and not block[k].startswith("$ "):
                output.append(block[k])
                k += 1
            if command.startswith("apportion "):
                found.append(Example(line, command, "\n".join(output)))
        i = end + 1
    return found


def why_not_run(example: Example) -> str | None:
    """Why an example is not rerun, or None when it is."""
    words = example.command.split()
    if words[1] not in RUNNABLE:
        return f"`apportion {words[1]}` needs a running server and real jobs (wall-clock output)"
    if any(c in example.command for c in "&;|"):
        return "a shell pipeline"
    if "../shared" in example.command:
        return "needs the Philly trace in ../shared (and takes minutes)"
    if "bad.csv" in example.command:
        return "the README does not show bad.csv's contents"
    if not example.output.strip():
        return "the README shows no output for it"
    return None


def normalise(text: str) -> list[str]:
    """Lines to compare: wall-clock figures out, runs of spaces and of rule characters as one."""
    lines = []
    for line in text.strip("\n").splitlines():
        if "sim wall time" in line:
            line = "sim wall time (not compared)"
        line = re.sub(r"([─━═])\1+", r"\1", line)
        lines.append(re.sub(r"\s+", " ", line).strip())
    return lines


def run(example: Example) -> str:
    """What the command prints into a pipe, run from a fresh directory: its stdout, or its stderr
    when it fails (a solver's banner on stderr is not part of the example)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as directory:
        where = REPO if "examples/" in example.command else directory  # the repository's example files, by path
        done = subprocess.run([sys.executable, "-m", "apportion", *shlex.split(example.command)[1:]], cwd=where,
                              env=env, capture_output=True, text=True, timeout=300)
    return done.stdout if done.returncode == 0 else done.stderr


ALL = examples(README.read_text(encoding="utf-8"))
RUN = [e for e in ALL if why_not_run(e) is None]


def test_the_readme_shows_commands_and_most_are_rerun():
    assert len(ALL) >= 10 and len(RUN) >= 5
    assert {e.command.split()[1] for e in RUN} >= {"simulate", "compare", "plan"}


@pytest.mark.parametrize("example", RUN, ids=[e.name for e in RUN])
def test_a_readme_example_prints_what_the_readme_shows(example):
    actual = run(example)
    expected, got = normalise(example.output), normalise(actual)
    if got != expected:
        diff = "\n".join(difflib.unified_diff(expected, got, "README.md", "now", lineterm="", n=1))
        pytest.fail(f"{example.name}: the README's output is stale\n{diff}\n\nwhat it prints now:\n{actual}")


def main() -> None:
    """Print each README example whose output moved, with what it prints now."""
    for example in ALL:
        reason = why_not_run(example)
        if reason is not None:
            print(f"skip {example.name}: {reason}")
            continue
        actual = run(example)
        same = normalise(actual) == normalise(example.output)
        print(f"{'same' if same else 'MOVED'} {example.name}")
        if not same:
            print(actual)


if __name__ == "__main__":
    main()


def test_ci_runs_the_readme_s_test_command():
    readme = README.read_text(encoding="utf-8")
    command = re.search(r"^\. \.venv/bin/activate && (python -m pytest.*)$", readme, re.M).group(1)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()

    assert ci[-1] == command
