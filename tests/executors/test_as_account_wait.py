"""A check made as a job's account is read back whatever the descriptor's number: a busy server
holds more than a thousand files and sockets open."""

import os
import resource

import pytest

from apportion.executors.local.as_account import readable


def test_an_answer_on_a_descriptor_above_1023_is_read():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"this machine allows {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1500)
    try:
        assert not readable(high, 0.05)  # nothing written yet: it waits, then says so
        os.write(write_end, b"x")
        assert readable(high, 1.0)
    finally:
        for fd in (read_end, write_end, high):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
