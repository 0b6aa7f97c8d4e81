"""What the server reads of a job's checkpoint directory, and as which OS account.

A job resumes from its newest intact checkpoint (apportion.runtime.checkpoint.newest_intact:
readable, and matching its SHA-256 where it has one); the server reads that once when an
attempt ends, never unpickling anything. It hashes only checkpoints up to VERIFY_MOST_BYTES
(it holds the scheduler's lock meanwhile, about 0.7 s a GiB); a larger one is verified by the
job's own restore, and the step that restore reached is recorded at its first lease call. Under ``--run-as mapped`` the server is root and a
job file may name any directory, so it reads the directory in a short child process forked
from the server that has dropped to the job's OS account (and execs nothing: the account may
not reach the server's Python): a file that account cannot read never counts as the job's
progress. A submit whose ``checkpoint_dir`` that account cannot use, or whose ``workdir`` it
cannot enter, is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from apportion.executors.local.as_account import answer_as, cannot_enter
from apportion.runtime.checkpoint import Intact, newest_intact
from apportion.serve.accounts.runas import Account

VERIFY_MOST_BYTES = 256 * 2**20  # larger checkpoints are verified by the job's restore, not under the server's lock
READ_TIMEOUT_S = 60.0  # listing the directory and hashing at most VERIFY_MOST_BYTES (~0.2 s) a file
CHECK_TIMEOUT_S = 10.0


def newest_intact_as(directory: str, account: Account | None) -> Intact:
    """The newest intact checkpoint in ``directory``, read as ``account`` (None: as the server)."""
    if account is None or os.geteuid() != 0:  # not root: the server is the account its jobs run as
        return newest_intact(directory, VERIFY_MOST_BYTES)
    try:
        found = _as_account(account, lambda: newest_intact(directory, VERIFY_MOST_BYTES)._asdict(), READ_TIMEOUT_S)
        return Intact(found["step"], tuple(found["skipped"]),
                      f"{found['error']} (as OS account {account.name})" if found["error"] else "")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return Intact(None, error=f"cannot read {directory} as OS account {account.name}: {err}")


def unusable_checkpoint_dir(directory: str, account: Account | None) -> str | None:
    """Why ``account`` could not keep its checkpoints in ``directory`` (reach, read and write it, or
    create it), or None. Checked by the account itself, so its groups and any ACL count."""
    return _problem_as(account, lambda: _cannot_use(directory))


def unusable_workdir(directory: str, account: Account | None) -> str | None:
    """Why ``account`` could not run a job in ``directory`` (one it cannot reach, enter and read, or that is
    not there), or None. ``os.stat``'s answer as the account: a directory it may not pass is a refusal."""
    return _problem_as(account, lambda: cannot_enter(directory))


def _problem_as(account: Account | None, check: Callable[[], str]) -> str | None:
    """What ``check()`` finds wrong when ``account`` runs it (None: nothing, or no other account to be)."""
    if account is None or os.geteuid() != 0:
        return None
    try:
        said = _as_account(account, check, CHECK_TIMEOUT_S)
    except (OSError, ValueError) as err:
        return f"cannot check it as OS account {account.name}: {err}"
    return f"{said} (as OS account {account.name}, which runs the job)" if said else None


def _cannot_use(directory: str) -> str:
    """Why this process cannot keep checkpoints in ``directory``; "" when it can."""
    path = probe = os.path.abspath(directory)
    while True:
        try:
            os.stat(probe)
        except FileNotFoundError:
            probe = os.path.dirname(probe)
            continue
        except OSError as err:
            return f"cannot reach {probe}: {err.strerror}"
        if probe == path:
            if not os.path.isdir(path):
                return "not a directory"
            return "" if os.access(path, os.R_OK | os.W_OK | os.X_OK) else "cannot read and write it"
        return "" if os.access(probe, os.W_OK | os.X_OK) else f"cannot create it in {probe}"


def _as_account(account: Account, work: Callable[[], object], timeout_s: float):
    """``work()``'s JSON-able answer, computed in a forked child that is ``account``; ValueError when
    it gives none (it failed, or ran past ``timeout_s`` and was killed)."""
    return json.loads(answer_as(account.identity(), lambda: json.dumps(work()), timeout_s))
