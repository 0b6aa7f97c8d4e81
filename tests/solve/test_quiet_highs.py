"""HiGHS prints nothing, on stdout or stderr, whichever solver model is created first; asked to
(``APPORTION_SOLVER_LOG=1``), it shows its banner and log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SNIPPETS = {
    "lp": "from apportion.solve.lp import LinearProgram\n"
          "lp = LinearProgram()\n"
          "lp.add_columns(1, cost=1.0, upper=1.0)\n"
          "lp.build().run()\n",
    "max-min": "import numpy as np\n"
               "from apportion.solve.max_min import MaxMinModel\n"
               "MaxMinModel(np.array([4.0, 2.0]))\n",
    "milp": "import numpy as np\n"
            "from apportion.solve.choice import ConfigurationChooser\n"
            "choice = ConfigurationChooser().choose(np.array([[1.0, 2.0], [3.0, 1.0]]), np.array([0, 0]),\n"
            "                                       np.array([[1.0, 2.0], [1.0, 2.0]]), np.array([2.0]), exact=True)\n"
            "assert choice.config.tolist() == [0, 0]\n",
    "helper": "from apportion.solve.highs import quiet_highs\n"
              "quiet_highs(); quiet_highs()\n",
}


def run(snippet: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", snippet + "print('done')"], capture_output=True, text=True,
                          check=True, env={**os.environ, **env})


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_creating_and_solving_a_model_prints_nothing(name):
    done = run(SNIPPETS[name])

    assert done.stdout == "done\n"
    assert "HiGHS" not in done.stderr


def test_the_solver_log_shows_the_banner_and_the_solve_when_asked():
    done = run(SNIPPETS["lp"], APPORTION_SOLVER_LOG="1")

    assert "Running HiGHS" in done.stdout
    assert "Optimal" in done.stdout
