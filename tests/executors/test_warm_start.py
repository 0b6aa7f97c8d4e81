"""Warm starts: a Python job forked from a spare wrapper that has imported torch already looks,
to the job, exactly like one exec'd cold; anything that cannot be made the same starts cold."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from apportion.executors.local import LocalExecutor, warm_start
from apportion.executors.local.procfs import group_members, stat_fields
from apportion.executors.local.spare_pool import live_spares
from ended import wait_exit

pytest.importorskip("torch", reason="a spare wrapper imports torch")

PROBE = '''
import json, os, signal, sys, torch
print("hello from", os.path.basename(__file__))
facts = {
    "argv": sys.argv, "path0": sys.path[0], "file": __file__, "name": __name__, "cwd": os.getcwd(),
    "env": {k: os.environ.get(k) for k in ("APPORTION_JOB_ID", "OMP_NUM_THREADS", "MY_SETTING", "CUDA_VISIBLE_DEVICES")},
    "torch_threads": torch.get_num_threads(), "fds": sorted(os.listdir("/proc/self/fd")),
    "group_led_by_parent": os.getpgid(0) == os.getppid(),
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)],
    "main_keys": sorted(k for k in globals() if k.startswith("__")),
    "signal_masks": [line.strip() for line in open("/proc/self/status") if line.startswith(("SigBlk", "SigIgn"))],
}
print(json.dumps(facts))
print("warm" if "--spare" in sys.orig_argv else "cold")
if sys.argv[1:] == ["boom"]:
    raise ValueError("boom")
if sys.argv[1:] == ["term"]:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))
    open("ready", "w").close()
    signal.pause()
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
'''

BOOM_LINE = PROBE.splitlines().index('    raise ValueError("boom")') + 1


def job_env(**extra) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "APPORTION_JOB_ID": "1", "OMP_NUM_THREADS": "1",
            "MY_SETTING": "x", "CUDA_VISIBLE_DEVICES": "", **extra}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("work")
    (work / "probe.py").write_text(PROBE)
    return work


@pytest.fixture(scope="module")
def warm_executor(tmp_path_factory):
    executor = LocalExecutor(tmp_path_factory.mktemp("warm-state"), spares=1)
    executor.poll()  # the first spare starts importing now
    return executor


def run(executor, work, job_id, command, **options):
    attempt = executor.start(job_id, 1, command, job_env(), str(work), ("cpu:0",), **options)
    ended = wait_exit(executor)
    return attempt, ended.code, executor.log_path(job_id, 1).read_text()


def facts(log: str) -> dict:
    return json.loads(next(line for line in log.splitlines() if line.startswith("{")))


def test_a_warm_job_sees_what_a_cold_one_sees(warm_executor, work, tmp_path):
    cold_executor = LocalExecutor(tmp_path)
    _, cold_code, cold_log = run(cold_executor, work, 1, [sys.executable, "probe.py", "3"])
    _, warm_code, warm_log = run(warm_executor, work, 1, [sys.executable, "probe.py", "3"])

    assert cold_log.splitlines()[-1] == "cold" and warm_log.splitlines()[-1] == "warm"
    assert warm_code == cold_code == 3
    assert facts(warm_log) == facts(cold_log)
    assert facts(warm_log)["torch_threads"] == 1  # OMP_NUM_THREADS=1, though the spare imported torch without it
    assert warm_log.splitlines()[0] == "hello from probe.py"


def test_an_uncaught_exception_prints_the_jobs_own_traceback_and_exits_1(warm_executor, work):
    _, code, log = run(warm_executor, work, 2, [sys.executable, "probe.py", "boom"])

    assert code == 1
    assert log.splitlines()[-4:] == ["Traceback (most recent call last):",
                                     f'  File "{work / "probe.py"}", line {BOOM_LINE}, in <module>',
                                     '    raise ValueError("boom")', "ValueError: boom"]


def test_a_plain_shell_line_starts_warm_and_a_pipeline_cold(warm_executor, work):
    line = f"{sys.executable} probe.py"
    warm, code, log = run(warm_executor, work, 3, line)
    cold, piped_code, piped_log = run(warm_executor, work, 4, line + " | cat")

    assert (code, log.splitlines()[-1]) == (0, "warm")
    assert (piped_code, piped_log.splitlines()[-1]) == (0, "cold")
    assert (warm.warm, cold.warm) == (True, False)  # what the start event says (lifecycle.py)


def test_a_job_can_ask_for_a_cold_start(warm_executor, work):
    _, code, log = run(warm_executor, work, 5, [sys.executable, "probe.py"], cold=True)

    assert (code, log.splitlines()[-1]) == (0, "cold")


def test_sigterm_reaches_a_warm_job_and_a_new_executor_adopts_its_attempt(warm_executor, work):
    (work / "ready").unlink(missing_ok=True)
    attempt = warm_executor.start(6, 2, [sys.executable, "probe.py", "term"], job_env(), str(work), ("cpu:1",))
    deadline = time.time() + 120
    while not (work / "ready").exists() and time.time() < deadline:
        time.sleep(0.05)

    found = LocalExecutor(warm_executor.state_dir).scan()  # what a restarted server finds
    assert [(a.job_id, a.attempt, a.slots, a.pid) for a in found] == [(6, 2, ("cpu:1",), attempt.pid)]
    assert warm_executor.terminate(6)
    ended = wait_exit(warm_executor)

    assert (ended.job_id, ended.attempt, ended.code) == (6, 2, 75)
    assert warm_executor.exit_record(6, 2) == 75
    assert group_members(attempt.pid) == []
    assert "warm" in warm_executor.log_path(6, 2).read_text()
    records = [json.loads(p.read_text()) for p in (warm_executor.state_dir / "spares").glob("*.json")]
    assert [r for r in records if r["job"] == 6] == []  # its spare's record went with the attempt


def server_with_a_waiting_spare(state_dir: Path, orphan_wait_s: float, **env) -> tuple[subprocess.Popen, int]:
    """A process standing for a server: an executor whose one spare has done its imports (and whose
    factory has started); and that spare's pid."""
    script = (
        "import time\nfrom apportion.executors.local import LocalExecutor\n"
        f"e = LocalExecutor({str(state_dir)!r}, spares=1, orphan_wait_s={orphan_wait_s}); e.poll()\n"
        "while not (e._pool.is_ready(e._pool._idle[0]) and e._pool._factory):\n    e.poll(); time.sleep(0.02)\n"
        "print(e._pool._idle[0].pid, flush=True); time.sleep(600)\n")
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env})
    return server, int(server.stdout.readline())


def kill_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGKILL)
    server.wait()


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while stat_fields(pid) is not None and time.time() < deadline:
        time.sleep(0.05)
    return stat_fields(pid) is None


def test_a_waiting_spare_outlives_its_server_and_the_next_one_adopts_it(work, tmp_path):
    server, spare = server_with_a_waiting_spare(tmp_path, orphan_wait_s=60)
    kill_server(server)
    time.sleep(1.5)  # longer than a spare's check of its owner
    assert stat_fields(spare) is not None
    restarted = LocalExecutor(tmp_path, spares=1, orphan_wait_s=60)
    assert restarted.scan() == []  # a waiting spare is no attempt

    restarted.poll()
    assert [s.pid for s in restarted._pool.waiting()] == [spare]
    assert restarted._pool.adopted == 2  # the spare, and the factory that forks the next ones
    time.sleep(1.5)  # it has read its new owner by now, and keeps waiting
    attempt = restarted.start(11, 1, [sys.executable, "probe.py", "3"], job_env(), str(work), ("cpu:0",))
    ended = wait_exit(restarted)

    assert attempt.pid == spare
    assert (ended.job_id, ended.code) == (11, 3)
    assert restarted.log_path(11, 1).read_text().splitlines()[-1] == "warm"
    restarted.close()


def test_a_spare_with_no_server_left_exits_after_its_orphan_wait(tmp_path):
    server, spare = server_with_a_waiting_spare(tmp_path, orphan_wait_s=1)
    kill_server(server)

    assert gone_within(spare, 30)
    deadline = time.time() + 60
    while live_spares(tmp_path) and time.time() < deadline:  # the factory too, once its imports are done
        time.sleep(0.05)
    assert live_spares(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / "spares").iterdir()) == []  # they took their files with them


def test_a_spare_started_in_another_environment_is_killed_not_adopted(tmp_path):
    server, spare = server_with_a_waiting_spare(tmp_path, orphan_wait_s=60, SPARE_TEST_SETTING="other")
    kill_server(server)
    restarted = LocalExecutor(tmp_path, spares=1)
    restarted.poll()

    assert gone_within(spare, 10)
    assert restarted._pool.adopted == 0 and [s.pid for s in restarted._pool.waiting()] != [spare]
    restarted.close()


def test_a_server_that_stops_cleanly_kills_its_waiting_spares(tmp_path):
    executor = LocalExecutor(tmp_path, spares=2)
    executor.poll()
    spares = [s.pid for s in executor._pool.waiting()]
    executor.close()

    assert len(spares) == 2 and all(gone_within(pid, 10) for pid in spares)
    assert list((tmp_path / "spares").iterdir()) == []


def test_an_elastic_jobs_replicas_are_forked_warm_and_meet_in_one_gloo_group(warm_executor, work):
    (work / "ranks.py").write_text(
        "import os, sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "total = torch.tensor([float(os.environ['RANK']) + 1])\n"
        "dist.all_reduce(total)\n"
        "how = 'warm' if '--spare' in sys.orig_argv else 'cold'\n"
        "# one write per rank: both ranks share the log, and print() writes its pieces one by one\n"
        "os.write(1, f\"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} sum {total.item()} {how}\\n\".encode())\n"
        "dist.destroy_process_group()\n")
    warm_executor.start(10, 1, [sys.executable, "ranks.py"], job_env(OMP_NUM_THREADS="2"), str(work),
                        ("cpu:0", "cpu:1"), replicas=2)
    ended = wait_exit(warm_executor)
    lines = sorted(line for line in warm_executor.log_path(10, 1).read_text().splitlines() if line.startswith("rank"))

    assert ended.code == 0
    assert lines == ["rank 0 of 2 sum 3.0 warm", "rank 1 of 2 sum 3.0 warm"]


def test_an_attempt_handed_to_a_spare_still_importing_survives_its_server(work, tmp_path):
    script = (
        "import os, sys, time\nfrom apportion.executors.local import LocalExecutor\n"
        f"e = LocalExecutor({str(tmp_path)!r}, spares=1); e.poll()\n"
        "maps = f'/proc/{e._pool._idle[0].pid}/maps'\n"
        "while 'libtorch' not in open(maps).read():  # importing torch: it dies with its server unless handed an attempt\n"
        "    time.sleep(0.01)\n"
        f"a = e.start(9, 1, [sys.executable, 'probe.py', '4'], dict(os.environ, PYTHONUNBUFFERED='1'), {str(work)!r}, ('cpu:0',))\n"
        "print(a.pid, flush=True); time.sleep(600)\n")
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    wrapper = int(server.stdout.readline())
    server.send_signal(signal.SIGKILL)  # at once: the spare is still importing torch
    server.wait()

    restarted = LocalExecutor(tmp_path)
    (found,) = restarted.scan()
    assert (found.job_id, found.attempt, found.pid) == (9, 1, wrapper)
    assert restarted.adopt(found)
    ended = wait_exit(restarted)
    assert (ended.job_id, ended.code) == (9, 4)
    assert restarted.log_path(9, 1).read_text().splitlines()[-1] == "warm"


def test_a_spare_that_runs_threads_after_its_imports_starts_its_job_cold_and_says_so(tmp_path, monkeypatch, work):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import threading, time\n"
                                           "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    executor = LocalExecutor(tmp_path / "state", spares=1)
    executor.poll()
    _, code, log = run(executor, work, 7, [sys.executable, "probe.py"])

    assert (code, log.splitlines()[-1]) == (0, "cold")
    assert "apportion: warm start off: the warm process runs 2 threads after its imports" in log


@pytest.mark.parametrize("command, extra, why", [
    ("python train.py | tee log", {}, "not a plain command"),
    (["python", "-u", "train.py"], {}, "not `python SCRIPT ARGS`"),
    (["/bin/echo", "train.py"], {}, "is not this server's Python"),
    (["python", "train.py"], {"PYTHONHASHSEED": "0"}, "PYTHONHASHSEED differs"),
    (["python", "train.py"], {"PYTHONPATH": "lib"}, "PYTHONPATH has a relative entry"),  # the spare's too
    (["python", "missing.py"], {}, "no script file missing.py"),
])
def test_what_starts_cold_and_why(tmp_path, command, extra, why):
    (tmp_path / "train.py").write_text("")
    python = Path(sys.executable)
    base = {"PATH": str(python.parent), "PYTHONPATH": ""}
    env = {**base, **extra}
    assert warm_start.refusal(["python", "-m", "mod"], base, base, str(python), str(tmp_path)) is None
    assert warm_start.refusal("python train.py --seed 1", base, base, str(python), str(tmp_path)) is None
    spare = env if "PYTHONPATH" in extra else base
    assert why in warm_start.refusal(command, env, spare, str(python), str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a job as another account needs root")
def test_a_warm_job_runs_as_its_account_exactly_as_a_cold_one(warm_executor, work, tmp_path):
    from apportion.serve.accounts.runas import lookup

    account = lookup("nobody", "alice")
    reachable = Path(tempfile.mkdtemp(prefix="apportion-work-"))  # pytest's own directories are root's alone
    try:
        os.chmod(reachable, 0o755)
        shutil.copy(work / "probe.py", reachable / "probe.py")
        os.chmod(reachable / "probe.py", 0o644)
        cold_executor = LocalExecutor(tmp_path)
        cold_executor.start(8, 1, [sys.executable, "probe.py"], job_env(), str(reachable), (), run_as=account)
        cold_code, cold_log = wait_exit(cold_executor).code, cold_executor.log_path(8, 1).read_text()
        warm_executor.start(8, 1, [sys.executable, "probe.py"], job_env(), str(reachable), (), run_as=account)
        warm_code, warm_log = wait_exit(warm_executor).code, warm_executor.log_path(8, 1).read_text()
    finally:
        shutil.rmtree(reachable, ignore_errors=True)

    assert warm_code == cold_code
    if cold_code == 126:  # the account may not run this interpreter (one under /root): neither starts
        assert warm_log == cold_log
        assert "apportion: cannot start" in warm_log and "Permission denied" in warm_log
    else:
        assert facts(warm_log) == facts(cold_log)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a job as another account needs root")
def test_a_warm_job_enters_a_workdir_only_as_its_account(warm_executor, work):
    from apportion.serve.accounts.runas import lookup

    warm_executor.start(9, 1, [sys.executable, "probe.py"], job_env(), str(work), (), run_as=lookup("nobody", "al"))
    assert wait_exit(warm_executor).code == 126  # pytest's directories are root's alone: never entered as root
    assert "cannot enter the workdir" in warm_executor.log_path(9, 1).read_text()


WARM_UP_JOB_IDS = itertools.count(101)  # the jobs forked_spare runs, on any executor: ids no test uses


def forked_spare(executor, work, timeout: float = 120.0):
    """Run jobs until the executor's next spare is one its factory forked (the first ones are
    processes of their own: the factory imports alongside them), and that spare is ready."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        executor.poll()
        spares = executor._pool.waiting()
        if spares and executor._pool.is_ready(spares[0]):
            if spares[0].process is None:
                return spares[0]
            run(executor, work, next(WARM_UP_JOB_IDS), [sys.executable, "probe.py"])
        time.sleep(0.05)
    raise AssertionError("no spare was forked in time")


@pytest.fixture(scope="module")
def factory_executor(tmp_path_factory):
    """An executor of one spare whose later spares its factory forks (the factory's imports done once for
    the tests that need it)."""
    executor = LocalExecutor(tmp_path_factory.mktemp("factory-state"), spares=1)
    yield executor
    executor.close()


def test_later_spares_are_forked_by_the_factory_and_their_jobs_see_what_a_cold_one_sees(factory_executor, tmp_path,
                                                                                        work):
    executor = factory_executor
    spare = forked_spare(executor, work)
    own_line = Path(f"/proc/{spare.pid}/cmdline").read_bytes().split(b"\0")
    _, warm_code, warm_log = run(executor, work, 2, [sys.executable, "probe.py", "3"])
    _, cold_code, cold_log = run(LocalExecutor(tmp_path / "cold"), work, 2, [sys.executable, "probe.py", "3"])

    assert spare.spare_id.encode() in own_line  # how scan() finds its attempt after a restart
    assert warm_log.splitlines()[-1] == "warm" and warm_code == cold_code == 3
    assert facts(warm_log) == facts(cold_log)


def test_a_job_outlives_its_killed_forked_wrapper_and_its_own_exit_code_is_recorded(factory_executor, work):
    executor = factory_executor
    forked_spare(executor, work)
    (work / "slow.py").write_text("import time\ntime.sleep(1.5)\nraise SystemExit(3)\n")
    attempt = executor.start(3, 1, [sys.executable, "slow.py"], job_env(), str(work), ("cpu:0",))
    deadline = time.time() + 10
    while not executor.pid_path(3, 1).exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(attempt.pid, signal.SIGKILL)
    ended = wait_exit(executor)

    assert (ended.job_id, ended.code) == (3, 3)  # supervised by the executor, it ran to its end
    assert executor.exit_record(3, 1) == 3


def test_when_the_factory_cannot_be_reached_spares_start_as_processes_and_jobs_still_start_warm(tmp_path, work):
    executor = LocalExecutor(tmp_path, spares=1)
    forked_spare(executor, work)
    (tmp_path / "spares" / "0000000000000000.fifo").unlink()  # its requests go nowhere now
    logs = []
    for job_id in range(1, 5):
        _, code, log = run(executor, work, job_id, [sys.executable, "probe.py"])
        logs.append((code, log.splitlines()[-1]))
    executor.poll()

    assert logs == [(0, "warm")] * 4
    assert executor._pool._factory is None and executor._pool._fork_failures >= 3
    assert executor._pool.waiting()[0].process is not None  # a spare of its own
    executor.close()
