"""Several policies replayed on the same inputs, one process per policy where there are cores.

What ``apportion compare`` runs; a Python user calls ``run_policies`` the same way::

    inputs = load_inputs(WorkloadSettings(jobs=200))
    results = run_policies(inputs, ["fifo", "las", "max-min-fairness"])
"""

from __future__ import annotations

import functools

import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from apportion.experiment import Inputs, run_policy
from apportion.sim import SimConfig, SimResult

# (policy spec, jobs ended, jobs in all, virtual time in seconds)
PolicyProgress = Callable[[str, int, int, float], None]


def worker_count(policies: int, workers: int = 0) -> int:
    """Processes for ``policies`` runs: ``workers`` if positive, else one a policy up to the CPU count."""
    return workers if workers > 0 else min(policies, os.cpu_count() or 1)


def run_policies(
    inputs: Inputs,
    specs: Sequence[str],
    config: SimConfig = SimConfig(),
    *,
    workers: int = 0,
    progress: PolicyProgress | None = None,
    record_holdings: bool = False,
    **options,
) -> list[SimResult]:
    """Replay ``inputs`` under each policy spec (``options`` and ``record_holdings`` as for
    run_policy); results in spec order.

    Runs ``worker_count(len(specs), workers)`` processes; one means here, one policy after
    another. ``progress`` is always called in this process. A ValueError of any policy (one
    that cannot work on these inputs) is raised here.
    """
    if record_holdings:
        options = {**options, "record_holdings": True}
    processes = worker_count(len(specs), workers)
    if processes <= 1:
        return [_run_here(inputs, spec, config, progress, options) for spec in specs]
    context = multiprocessing.get_context("spawn")
    if progress is None:
        with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
            return _gather([pool.submit(_run_in_worker, inputs, s, config, options, None) for s in specs])
    with context.Manager() as manager:
        updates = manager.Queue()
        stop = threading.Event()
        listener = threading.Thread(target=_relay, args=(updates, stop, progress), daemon=True)
        listener.start()
        try:
            with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
                return _gather([pool.submit(_run_in_worker, inputs, s, config, options, updates) for s in specs])
        finally:
            stop.set()
            listener.join()


def _run_here(inputs: Inputs, spec: str, config: SimConfig, progress: PolicyProgress | None,
              options: dict) -> SimResult:
    report = None if progress is None else functools.partial(progress, spec)
    return run_policy(inputs, spec, config, progress=report, **options)


def _run_in_worker(inputs: Inputs, spec: str, config: SimConfig, options: dict, updates) -> SimResult:
    """One run in a worker process; its progress reports travel to the parent through ``updates``."""
    relay = None if updates is None else (lambda *report: updates.put(report))
    return _run_here(inputs, spec, config, relay, options)


def _gather(futures) -> list[SimResult]:
    """The results in order; on the first failure the runs not yet started are dropped."""
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _relay(updates, stop: threading.Event, progress: PolicyProgress) -> None:
    """Hand the workers' progress reports to ``progress``; once told to stop, the last of them too."""
    while True:
        try:
            spec, ended, total, now_s = updates.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                return
            continue
        except (EOFError, OSError):  # the manager is gone
            return
        progress(spec, ended, total, now_s)
