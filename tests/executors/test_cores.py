"""An attempt held to its CPU cores by the local executor: affinity read back from /proc, on the live
process and all its threads, changed without a restart; the CPU quota written to its cgroup's files."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from apportion.executors.local import LocalExecutor
from apportion.executors.local.cores import CpuQuota

# a job with a second thread, both asleep: the affinity must reach every thread of the job
JOB = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); print('up', flush=True); time.sleep(60)"


def allowed(pid: int) -> set[str]:
    """Cpus_allowed_list of every thread of process ``pid``."""
    lists = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        lists.add(next(line.split(":")[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list")))
    return lists


def job_pid(executor: LocalExecutor, timeout: float = 20.0) -> int:
    """The job's own process (the wrapper's child), once it runs with its second thread."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            pid = int(executor.pid_path(1, 1).read_text())
            if "up" in executor.tail(1, 1) and len(os.listdir(f"/proc/{pid}/task")) >= 2:
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the job did not start: {executor.tail(1, 1)}")


def test_the_cores_set_on_a_running_attempt_are_its_threads_affinity_and_change_without_a_restart(tmp_path):
    executor = LocalExecutor(tmp_path)
    cpus = sorted(os.sched_getaffinity(0))
    attempt = executor.start(1, 1, [sys.executable, "-c", JOB], dict(os.environ), str(tmp_path), ("cpu:0",))
    try:
        pid = job_pid(executor)
        assert executor.set_cores(1, (cpus[0],), 0.5)
        assert allowed(pid) == {str(cpus[0])} and allowed(attempt.pid) == {str(cpus[0])}
        if "cgroup" in executor.core_enforcement:  # and its time, where this machine lets a quota be set
            assert "/job-1" in Path(f"/proc/{pid}/cgroup").read_text()
        assert executor.set_cores(1, tuple(cpus[-1:]), 1.0)  # moved: same process, new core
        assert allowed(pid) == {str(cpus[-1])}
        assert int(executor.pid_path(1, 1).read_text()) == pid
        assert not executor.set_cores(2, (cpus[0],), 1.0)  # no such attempt
    finally:
        executor.kill(1)
        deadline = time.time() + 10
        while not executor.poll() and time.time() < deadline:
            time.sleep(0.05)
    cgroup = CpuQuota(executor.state_dir).job_dir(1)  # where this machine has one: gone with the attempt
    assert cgroup is None or not cgroup.exists()


def test_a_quota_is_the_share_of_each_period_in_the_attempts_own_cgroup(tmp_path):
    root = tmp_path / "cpu"  # a cgroup v1 cpu hierarchy's files, as plain files
    quota = CpuQuota(tmp_path / "state", root=root, version=1)
    assert quota.how == "cgroup v1 cpu.cfs_quota_us"
    assert quota.set(4, os.getpgid(0), 0.25)
    (job,) = (root).glob("apportion-*/job-4")
    assert (job / "cpu.cfs_period_us").read_text() == "100000"
    assert (job / "cpu.cfs_quota_us").read_text() == "25000"
    assert (job / "cpu.shares").read_text() == "256"  # a quarter of a busy process's weight
    assert (job.parent / "cpu.shares").read_text() == str(1024 * len(os.sched_getaffinity(0)))
    v2 = CpuQuota(tmp_path / "state", root=tmp_path / "unified", version=2)
    assert v2.set(4, os.getpgid(0), 1.5)
    assert next((tmp_path / "unified").glob("apportion-*/job-4/cpu.max")).read_text() == "150000 100000"


def test_no_writable_cgroup_means_no_quota_and_says_so(tmp_path):
    quota = CpuQuota(tmp_path, version=0)
    assert not quota.set(1, os.getpgid(0), 0.5)
    executor = LocalExecutor(tmp_path)
    executor._quota = quota
    assert executor.core_enforcement == "affinity only (no writable cgroup for a CPU quota)"


def test_an_ended_attempts_cgroup_is_removed_once_empty_and_the_servers_with_its_last(tmp_path):
    root = tmp_path / "cpu"
    quota = CpuQuota(tmp_path / "state", root=root, version=1)
    quota.set(1, os.getpgid(0), 1.0)
    quota.set(2, os.getpgid(0), 1.0)
    for name in ("cgroup.procs", "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares"):  # plain files here: a cgroup has none
        for job in (1, 2):
            (quota.job_dir(job) / name).unlink()
    (quota.job_dir(2) / "a zombie").touch()  # a process not yet reaped: it cannot be removed yet
    quota.remove(1)
    quota.remove(2)
    assert not quota.job_dir(1).exists() and quota.job_dir(2).exists() and quota.leftover
    (quota.job_dir(2) / "a zombie").unlink()
    quota.sweep()
    (root.glob("apportion-*/cpu.shares").__next__()).unlink()
    quota.sweep()
    assert not quota.leftover and list(root.iterdir()) == []
