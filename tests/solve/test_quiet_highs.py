"""HiGHS's banner never reaches stdout, whichever solver model is created first."""

from __future__ import annotations

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
    "helper": "from apportion.solve.highs import quiet_highs\n"
              "quiet_highs(); quiet_highs()\n",
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_creating_a_model_writes_nothing_on_stdout(name):
    done = subprocess.run([sys.executable, "-c", SNIPPETS[name] + "print('done')"],
                          capture_output=True, text=True, check=True)

    assert done.stdout == "done\n"
