"""`--json` prints JSON and nothing else on stdout, whatever the library writes there meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def apportion(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """Run the command in a fresh interpreter (``prelude`` first), so that stdout is a real file descriptor."""
    code = prelude + "\nimport sys\nfrom apportion.cli import app\napp(sys.argv[1:], prog_name='apportion')\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_simulate_json_with_an_lp_policy_parses():
    done = subprocess.run([sys.executable, "-m", "apportion", "simulate", "-p", "max-min-fairness", "--jobs", "30",
                           "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["policy"] == "max-min-fairness"


def test_compare_json_with_lp_policies_in_parallel_parses():
    done = apportion("compare", "--policies", "max-min-fairness,min-makespan", "--jobs", "30", "--workers", "2",
                     "--json")

    assert done.returncode == 0, done.stderr
    assert [s["policy"] for s in json.loads(done.stdout)["policies"]] == ["max-min-fairness", "min-makespan"]


NOISY = """
import os
{target}
real = getattr(target, {name!r})
def noisy(*args, **kwargs):
    os.write(1, b"noise on file descriptor 1\\n")
    print("noise from print")
    return {result}
setattr(target, {name!r}, noisy)
"""

# command line, the library object it calls, what to replace the call's result with
CASES = {
    "simulate": (("simulate", "-p", "las", "--jobs", "20", "--json"),
                 "import apportion.experiment as target", "run_policy", "real(*args, **kwargs)"),
    "compare": (("compare", "--policies", "fifo,las", "--jobs", "20", "--workers", "1", "--json"),
                "import sys, apportion.compare; target = sys.modules['apportion.compare']", "run_policies", "real(*args, **kwargs)"),
    "plan": (("plan", "--preset", "gpt3-1.3b", "--gpus", "8", "--top", "1", "--json"),
             "import apportion.perf as target", "plan", "real(*args, **kwargs)"),
    "status": (("status", "--json", "--server", "http://127.0.0.1:9"),
               "from apportion.serve.client import Client as target", "status", "{'policy': 'las'}"),
    "queue": (("queue", "--json", "--server", "http://127.0.0.1:9"),
              "from apportion.serve.client import Client as target", "jobs_text",
              """'[{"id": "1", "status": "running", "finished": null}]'"""),
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_library_writes_to_stdout_do_not_reach_the_json(command):
    args, target, name, result = CASES[command]

    done = apportion(*args, prelude=NOISY.format(target=target, name=name, result=result))

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)
    assert "noise on file descriptor 1" in done.stderr
    assert "noise from print" in done.stderr
