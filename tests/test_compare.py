"""Several policies on one workload from Python: the same results in one process or several."""

from __future__ import annotations

import pytest

from apportion.compare import run_policies
from apportion.experiment import WorkloadSettings, load_inputs


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(WorkloadSettings(jobs=30))


def summaries(results):
    return [{k: v for k, v in r.summary.items() if k != "sim_wall_s"} for r in results]


def test_results_come_in_the_order_asked_and_progress_reaches_every_job(inputs):
    for workers in (1, 2):
        seen = {}
        results = run_policies(inputs, ["las", "fifo"], workers=workers,
                               progress=lambda spec, ended, total, now_s: seen.__setitem__(spec, (ended, total)))

        assert [r.summary["policy"] for r in results] == ["las", "fifo"]
        assert seen == {"las": (30, 30), "fifo": (30, 30)}


def test_parallel_processes_give_what_one_process_gives(inputs):
    assert summaries(run_policies(inputs, ["fifo", "las"], workers=2)) == \
        summaries(run_policies(inputs, ["fifo", "las"], workers=1))


def test_a_policy_that_cannot_run_is_a_value_error(inputs):
    with pytest.raises(ValueError, match="hierarchical"):
        run_policies(inputs, ["fifo", "hierarchical"], workers=2)
