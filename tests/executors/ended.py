"""What the local executor tests wait for: the next attempt to end."""

import time


def wait_exit(executor, timeout: float = 120.0):
    """The first attempt ``executor.poll()`` reports ended, within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ended = executor.poll()
        if ended:
            return ended[0]
        time.sleep(0.05)
    raise AssertionError("no attempt ended in time")
