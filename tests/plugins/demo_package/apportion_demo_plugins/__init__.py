"""A researcher's package of apportion plugins, one of each kind, installed by the tests
(tests/plugins/plugin_install.py) with the entry points each test gives."""

import json
import math

import numpy as np

from apportion.executors.fake import FakeExecutor
from apportion.mechanism.privacy_policies import PrivacyPolicy
from apportion.policies.api import Allocation, Option, OrderingPolicy, PolicyEntry


def _by(value):
    if value not in ("gpus", "steps"):
        raise ValueError(f"must be gpus or steps, got '{value}'")
    return value


class SmallestFirst(OrderingPolicy):
    """the smallest job first (by GPUs or by steps), whole GPUs, preemptive"""

    requires_api = 1
    options = (
        Option("smallest_by", str, "what makes a job small: gpus or steps", "gpus", metavar="gpus|steps",
               check=_by),)

    def __init__(self, smallest_by="gpus", **rest):
        super().__init__(**rest)
        self.smallest_by = smallest_by

    def rank_key(self, jobs, throughputs):
        return jobs.num_gpus.astype(float) if self.smallest_by == "gpus" else jobs.remaining_steps.astype(float)


SMALLEST_AS_ENTRY = PolicyEntry("any-name", "apportion_demo_plugins:SmallestFirst", "smallest first, declared as an entry",
                                options=SmallestFirst.options)


class NeedsNewerApi(SmallestFirst):
    """written for a later apportion"""

    requires_api = 99


class TooGenerous:
    """gives every job twice its time"""

    def allocate(self, jobs, cluster, throughputs):
        return Allocation(jobs.index, np.full((len(jobs.index), len(cluster.gpu_types)), 2.0))

    def next_change_s(self, jobs, running):
        return math.inf


NOT_A_POLICY = 42


class RentTheFirstType:
    """rents every job the first instance type it can use"""

    def choose(self, view):
        return np.where(view.usable.any(axis=1), view.usable.argmax(axis=1), -1)


class RentNothingSensible:
    def choose(self, view):
        return np.full(view.usable.shape[0], 10_000)


class BiggestFirst(PrivacyPolicy):
    """every block's budget unlocked when it arrives; the biggest claims granted first"""

    def order(self, waiting, claims, shares, room, arrived_s, rdp):
        return waiting[np.argsort(-shares[waiting], kind="stable")]


class ForgetfulPrivacy(PrivacyPolicy):
    def order(self, waiting, claims, shares, room, arrived_s, rdp):
        return np.array([10_000])


def read_jsonl(path):
    """a trace as JSON lines, one job a line, with apportion's trace columns"""
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def read_and_fail(path):
    raise OSError(f"cannot reach the trace server for {path}")


class DemoExecutor(FakeExecutor):
    """a fake executor standing in for a researcher's own (a cluster manager's API, say)"""

    def __init__(self, state_dir, slots):
        super().__init__(state_dir)
        self.slots = slots
