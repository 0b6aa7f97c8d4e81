"""Every executor offers the calls of the ``Executor`` protocol, with the protocol's parameters."""

from __future__ import annotations

import inspect

import pytest

from apportion.executors.base import Executor
from apportion.executors.fake import FakeExecutor
from apportion.executors.local import LocalExecutor
from apportion.executors.ray_executor import RayExecutor
from apportion.executors.slurm.executor import SlurmExecutor

PROTOCOL_METHODS = sorted(name for name, value in vars(Executor).items()
                          if callable(value) and not name.startswith("_"))


@pytest.mark.parametrize("make", [LocalExecutor, FakeExecutor, RayExecutor, SlurmExecutor],
                         ids=["local", "fake", "ray", "slurm"])
def test_an_executor_satisfies_the_protocol(make, tmp_path):
    executor = make(tmp_path)
    assert isinstance(executor, Executor)
    for name in PROTOCOL_METHODS:
        wanted = list(inspect.signature(getattr(Executor, name)).parameters)[1:]
        offered = inspect.signature(getattr(executor, name)).parameters
        required = [p for p, spec in offered.items() if spec.default is inspect.Parameter.empty]
        assert list(offered)[: len(wanted)] == wanted, name  # extra tuning parameters must have defaults
        assert len(required) <= len(wanted), name


def test_the_protocol_names_every_call_the_scheduler_and_server_make():
    assert PROTOCOL_METHODS == sorted(["adopt", "capacity", "close", "exit_record", "is_alive", "kill", "kill_attempt",
                                       "log_path", "poll", "refusal", "room", "scan", "set_cores", "slots_per_node", "start", "tail",
                                       "terminate"])
