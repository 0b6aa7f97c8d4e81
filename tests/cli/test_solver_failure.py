"""A solver that gives no answer ends the command with one line, not a traceback."""

import subprocess
import sys

SCRIPT = """
import apportion.sim.simulator as simulator
from apportion.solve.shares import SolveError

def no_answer(self):
    raise SolveError("max-min LP last stage: Unknown")

simulator.Simulator.run = no_answer
from apportion.cli import main
main(prog_name="apportion")
"""


def test_a_solver_failure_is_one_line_on_stderr_and_exit_code_1():
    done = subprocess.run([sys.executable, "-c", SCRIPT, "simulate", "--jobs", "5"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: the LP solver gave no answer (max-min LP last stage: Unknown); please report this with the "
        "command that gave it"
    ]
