"""The local executor: each attempt a process group on this machine, led by its wrapper.

How an attempt starts. ``LocalExecutor.start`` (executor.py) writes the job's environment to
``attempt-N.env`` (owner-only) and gives the attempt a *wrapper*, ``python -m
apportion.executors.local.wrapper … -- COMMAND`` (wrapper.py), the leader of a new process group
that the job's processes share:

- cold: the executor starts the wrapper itself, and the wrapper execs the job's command;
- from a spare: a job that is a plain ``python SCRIPT`` or ``python -m MODULE`` is handed to a
  wrapper started ahead of time with torch imported (spare_pool.py, the server's side and the
  files both sides share; spare_process.py, what runs in a spare and the factory that forks the
  later ones). The executor writes the spare's record and signals it; the spare becomes that
  attempt's wrapper and forks the job's Python process from itself instead of exec'ing one
  (warm_start.py), or execs it when the job cannot start warm.

Who supervises it. The wrapper: it waits for the job (and, after a stop signal, for what a
shell line left checkpointing, as its subreaper), writes ``attempt-N.exit``, and kills what is
left of the group. It outlives the server: a server started later finds the wrappers of its
state directory by their command lines in ``/proc`` (wrapper_command.py, procfs.py) and adopts
them, those of an earlier version too. The executor follows the wrappers it started as its
children, and those it did not (a spare forked by the factory, one adopted from an earlier
server) through ``/proc``.

How orphans are taken over. The executor becomes the subreaper of its descendants when it
starts its first attempt, so when a wrapper dies (``kill -9``, the OOM killer) the job's
processes become the executor's children: it finds the job's command by ``attempt-N.pid`` and
does what the wrapper would have (orphans.py), and the job keeps its work. A job whose wrapper
this server is no ancestor of (adopted from an earlier server) cannot be reaped: what is left of
its group is killed as soon as the wrapper is seen gone.

Ray replicas run the same wrapper on their nodes (``apportion.executors.ray_replica``).

Importing this package imports nothing: the wrapper, one of its modules, starts with every
attempt. ``LocalExecutor`` is loaded on first use.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "LocalExecutor":
        from apportion.executors.local.executor import LocalExecutor

        return LocalExecutor
    raise AttributeError(f"module 'apportion.executors.local' has no attribute '{name}'")


__all__ = ["LocalExecutor"]
