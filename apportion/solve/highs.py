"""A HiGHS model that prints nothing, and runs without asking the OS for its cores.

highspy 1.16 prints its banner ("Running HiGHS …") from C on file descriptor 1 when a model is
created, before ``output_flag`` can be set; every model is therefore created here, with that
descriptor pointed at the null device. ``APPORTION_SOLVER_LOG=1`` in the environment lets the
banner and HiGHS's log of every run through, to debug a solve: on stdout, which the commands
that print results there point at stderr while they work.

With its default ``threads=0``, every ``run()`` counts the machine's cores by reading /proc
and /sys, about 0.3 ms: most of a warm re-solve of the simulator's small LPs. apportion's LPs
are solved by the serial simplex (the MIP of the goodput policy barely uses threads), so
models get one thread. HiGHS's thread pool is one per process and its size is fixed by the
first run; if code outside apportion started it with more threads, a run asking for one is
refused, and from then on models are made with HiGHS's default.
"""

from __future__ import annotations

import os

import highspy

from apportion.stdio import c_stdout_discarded

SOLVER_LOG = "APPORTION_SOLVER_LOG"  # "1": HiGHS's banner and logs shown

_threads = 1


def quiet_highs() -> highspy.Highs:
    """A new HiGHS model with its log off and its banner discarded (both shown under ``SOLVER_LOG``)."""
    if solver_log():
        highs = highspy.Highs()
    else:
        with c_stdout_discarded():
            highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
    highs.setOptionValue("threads", _threads)
    return highs


def solver_log() -> bool:
    """Whether the environment asks for HiGHS's own output (``APPORTION_SOLVER_LOG=1``)."""
    return os.environ.get(SOLVER_LOG, "") == "1"


def run(highs: highspy.Highs) -> highspy.HighsStatus:
    """``highs.run()``, falling back to HiGHS's default threads where the process's pool differs."""
    global _threads
    status = highs.run()
    if status == highspy.HighsStatus.kError and highs.getModelStatus() == highspy.HighsModelStatus.kNotset \
            and highs.getOptionValue("threads") != 0:
        _threads = 0
        highs.setOptionValue("threads", 0)
        status = highs.run()
    return status
