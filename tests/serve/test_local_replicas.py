"""An elastic job's replicas on this machine (LocalExecutor with ``replicas``): one process a
slot with torch.distributed's variables, stopped together, none outliving its attempt."""

from __future__ import annotations

import os
import signal
import sys
import time

from apportion.executors.local import LocalExecutor
from apportion.executors.local.procfs import group_members
from serve_helpers import wait_exits


def start(executor, tmp_path, code: str, replicas: int = 2, **extra):
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2", **extra}
    return executor.start(3, 1, [sys.executable, "-c", code], environ, str(tmp_path),
                          tuple(f"cpu:{i}" for i in range(replicas)), replicas=replicas)


def test_each_replica_gets_its_rank_and_one_rendezvous(tmp_path):
    executor = LocalExecutor(tmp_path)
    # one write per replica: both share the log, and print() writes its pieces one by one
    code = ("import os; e = os.environ; os.write(1, ' '.join(['rank', e['RANK'], 'of', e['WORLD_SIZE'], 'local',"
            " e['LOCAL_RANK'], e['LOCAL_WORLD_SIZE'], 'at', e['MASTER_ADDR'], e['MASTER_PORT'], 'threads',"
            " e['OMP_NUM_THREADS']]).encode() + b'\\n')")
    start(executor, tmp_path, code, replicas=2)
    (ended,) = wait_exits(executor)
    lines = sorted(line for line in executor.log_path(3, 1).read_text().splitlines() if line.startswith("rank"))

    assert ended.code == 0
    assert [line.split()[:6] for line in lines] == [["rank", "0", "of", "2", "local", "0"],
                                                     ["rank", "1", "of", "2", "local", "1"]]
    assert len({tuple(line.split()[7:10]) for line in lines}) == 1  # one address and port for both
    assert all(line.endswith("threads 1") for line in lines)  # the attempt's two threads, one a replica


def test_a_crashed_replica_takes_the_others_with_it_and_leaves_no_process(tmp_path):
    executor = LocalExecutor(tmp_path)
    code = "import os, time\nif os.environ['RANK'] == '1': raise SystemExit(3)\ntime.sleep(60)"
    attempt = start(executor, tmp_path, code)
    (ended,) = wait_exits(executor)

    assert ended.code == 3  # the crash's code: the server retries the job from its checkpoint
    assert group_members(attempt.pid) == []
    assert "rank 1 of 2 ended (3); stopping the others" in executor.log_path(3, 1).read_text()


def test_sigterm_reaches_every_replica_and_the_attempt_counts_as_preempted(tmp_path):
    executor = LocalExecutor(tmp_path)
    code = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
            "open(os.environ['READY'] + os.environ['RANK'], 'w').close()\n"
            "time.sleep(60)")
    attempt = start(executor, tmp_path, code, READY=str(tmp_path / "ready-"))
    deadline = time.time() + 20
    while not all((tmp_path / f"ready-{r}").exists() for r in range(2)) and time.time() < deadline:
        time.sleep(0.05)
    executor.terminate(3)
    (ended,) = wait_exits(executor)

    assert ended.code == 75
    assert group_members(attempt.pid) == []


def test_a_replica_killed_by_a_signal_is_a_crash_not_a_preemption(tmp_path):
    executor = LocalExecutor(tmp_path)
    code = "import os, signal, time\nif os.environ['RANK'] == '0': os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)"
    attempt = start(executor, tmp_path, code)
    (ended,) = wait_exits(executor)

    assert ended.code == -signal.SIGKILL
    assert group_members(attempt.pid) == []
