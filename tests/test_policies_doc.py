"""docs/policies.md, the tutorial on writing a policy, is what apportion does today: each Python
block is the file of examples/policies/ it names, and each `simulate`/`compare` it shows prints
what it shows (compared as the README's outputs are: tests/test_readme.py), run from the
repository's root, where the tutorial's paths lead."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys

import pytest
from test_readme import REPO, examples, normalise

DOC = REPO / "docs" / "policies.md"
TEXT = DOC.read_text(encoding="utf-8")
RUN = [e for e in examples(TEXT) if e.command.split()[1] in ("simulate", "compare") and e.output.strip()]


def test_the_tutorials_code_is_the_examples_files():
    blocks = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
    files = {path.name: path.read_text() for path in (REPO / "examples" / "policies").glob("*.py")}

    assert len(blocks) == 2
    for block in blocks:
        assert block in files.values(), f"docs/policies.md shows code that is in no file of examples/policies:\n{block}"


def test_the_tutorial_runs_both_policies_in_simulate_and_compare():
    commands = [e.command for e in RUN]
    assert any("simulate" in c and "equal_share.py:EqualShare" in c for c in commands)
    assert any("simulate" in c and "throughput_floor.py:ThroughputFloor" in c for c in commands)
    assert any(c.split()[1] == "compare" and "equal_share" in c and "throughput_floor" in c for c in commands)


@pytest.mark.parametrize("example", RUN, ids=lambda e: e.name.replace("README.md", "docs/policies.md"))
def test_a_tutorial_command_prints_what_the_tutorial_shows(example):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "apportion", *shlex.split(example.command)[1:]], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    actual = done.stdout if done.returncode == 0 else done.stderr
    expected, got = normalise(example.output), normalise(actual)
    if expected != got:
        diff = "\n".join(difflib.unified_diff(expected, got, "docs/policies.md", "now", lineterm="", n=1))
        pytest.fail(f"docs/policies.md:{example.line}: the output is stale\n{diff}\n\nwhat it prints now:\n{actual}")
