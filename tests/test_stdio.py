"""What reaches file descriptor 1 around ``stdout_to_stderr`` and ``c_stdout_discarded``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import ctypes, os, sys
from apportion.stdio import c_stdout_discarded, stdout_to_stderr
libc = ctypes.CDLL(None)
libc.printf(b"C before\\n")
with c_stdout_discarded():
    libc.printf(b"C inside, buffered\\n")
    os.write(1, b"fd 1 inside\\n")
print("python after")
with stdout_to_stderr():
    with c_stdout_discarded():
        os.write(1, b"fd 1 discarded within a redirection\\n")
    os.write(1, b"fd 1 redirected\\n")
libc.printf(b"C after\\n")
"""


def test_only_what_the_block_writes_to_descriptor_1_is_lost_and_the_rest_keeps_its_order():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, check=True)

    assert done.stdout == "C before\npython after\nC after\n"
    assert done.stderr == "fd 1 redirected\n"
