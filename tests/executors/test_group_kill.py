"""Ending an attempt's process group, as the executor, the wrapper and the spare pool all do it."""

import os
import signal
import subprocess
import sys
import textwrap

from apportion.executors.local import executor, spare_pool, wrapper
from apportion.executors.local.group_kill import kill_the_others, signal_group


def test_a_group_is_killed_and_one_already_gone_is_no_error():
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    assert signal_group(sleeper.pid) is True
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert signal_group(sleeper.pid) is False  # nothing of it left: no ProcessLookupError


def test_the_caller_kills_the_rest_of_its_group_and_lives_to_say_so():
    code = textwrap.dedent("""
        import subprocess, sys
        from apportion.executors.local.group_kill import kill_the_others
        import os
        sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
        kill_the_others(os.getpgid(0))
        print([s.wait(timeout=10) for s in sleepers], flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          start_new_session=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[{-signal.SIGKILL}, {-signal.SIGKILL}]"


def test_the_executor_the_wrapper_and_the_spare_pool_end_groups_through_it():
    assert executor.signal_group is spare_pool.signal_group is wrapper.signal_group is signal_group
    assert wrapper.kill_the_others is kill_the_others
