"""Jobs that wait for others (a trace's ``after`` column): held out of the round until what they
name completed, unschedulable when it never can. Replays worked out by hand on one or two GPUs
at 1 step/s, 360-second rounds, no start cost."""

from pathlib import Path

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.dependencies import Dependencies
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.result import JobStatus
from apportion.workloads.trace_csv import read_workload_csv

ONE_STEP_A_SECOND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1, 2),
                                    steps_per_s=np.array([[[1.0, 2.0]]]))


def jobs(submit, total_steps, after, num_gpus=None) -> JobTable:
    """Jobs named A, B, C, … in the order given; ``after``: for each, the positions it waits for."""
    n = len(submit)
    return JobTable.build(
        job_id=[chr(ord("A") + i) for i in range(n)], submit_time_s=submit, kind_names=["a"] * n,
        num_gpus=num_gpus or [1] * n, total_steps=total_steps, kinds=("a",), after=Dependencies.of_lists(after),
    )


def replay(table: JobTable, cluster: str = "v100:1", policy: str = "fifo"):
    return simulate(table, parse_cluster_shorthand(cluster), ONE_STEP_A_SECOND, make_policy(policy))


def test_a_job_starts_exactly_when_the_job_it_runs_after_finishes():
    """B arrives first (at 0) but runs after A, which arrives at 10 and starts at the next
    round (360); A's 720 steps end at 1080, a round boundary, and B starts then."""
    held = replay(jobs([0.0, 10.0], [100.0, 720.0], after=[[1], []]))
    free = replay(jobs([0.0, 10.0], [100.0, 720.0], after=[[], []]))

    assert free.first_start_s.tolist() == [0.0, 360.0]  # without the dependency B goes first
    assert held.first_start_s.tolist() == [1080.0, 360.0]
    assert held.finish_s.tolist() == [1180.0, 1080.0]
    assert held.status.tolist() == [JobStatus.COMPLETED] * 2


def test_a_held_job_leaves_idle_gpus_idle():
    """Two GPUs, both jobs at 0: B waits for A although a GPU is free, and starts at 720 when A ends."""
    result = replay(jobs([0.0, 0.0], [720.0, 360.0], after=[[], [0]]), cluster="v100:2")

    assert result.first_start_s.tolist() == [0.0, 720.0]
    assert result.finish_s.tolist() == [720.0, 1080.0]


def test_a_job_after_one_that_cannot_run_ends_unschedulable_and_so_does_its_own_follower():
    """A needs 4 GPUs on a 1-GPU cluster; B runs after A, C after B, D after nobody."""
    result = replay(jobs([0.0, 0.0, 0.0, 0.0], [100.0] * 4, after=[[], [0], [1], []], num_gpus=[4, 1, 1, 1]))

    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE] * 3 + [JobStatus.COMPLETED]
    assert result.reasons.tolist()[1:] == [
        "job A, which it runs after, cannot be scheduled",
        "job B, which it runs after, cannot be scheduled",
        "",
    ]
    assert result.summary["unschedulable"] == 3


def test_a_job_waits_for_every_job_it_names():
    """C runs after A (360 s) and B (720 s, behind A on the one GPU): it starts at 1080."""
    result = replay(jobs([0.0, 0.0, 0.0], [360.0, 360.0, 100.0], after=[[], [], [0, 1]]))

    assert result.first_start_s.tolist() == [0.0, 360.0, 720.0]
    assert result.finish_s.tolist() == [360.0, 720.0, 820.0]


def test_on_the_servers_clock_a_held_job_starts_in_the_early_round_its_dependency_frees():
    """As ``apportion serve`` does: A's end (700 s, between regular rounds) starts a round early for B."""
    table = jobs([0.0, 0.0], [700.0, 100.0], after=[[], [0]])
    result = simulate(table, parse_cluster_shorthand("v100:2"), ONE_STEP_A_SECOND, make_policy("fifo"),
                      SimConfig(wall_clock=True))

    assert result.first_start_s.tolist() == [0.0, 700.0]


@pytest.mark.parametrize("policy", ["las", "max-min-fairness", "srtf"])
def test_other_policies_hold_the_job_too(policy):
    result = replay(jobs([0.0, 0.0], [720.0, 360.0], after=[[], [0]]), cluster="v100:2", policy=policy)

    assert result.first_start_s[1] == 720.0


# the after column of a trace ---------------------------------------------------------------

HEADER = "job_id,submit_time_s,duration_s,num_gpus,kind,steps,after\n"


def read(tmp_path: Path, rows: str, **options) -> JobTable:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + rows)
    return read_workload_csv(path, throughputs=ONE_STEP_A_SECOND, **options)


def test_a_trace_names_the_jobs_a_job_runs_after_by_id(tmp_path):
    table = read(tmp_path, "prep,0,1,1,a,720,\ntrain,0,1,1,a,360,prep\nreport,5,1,1,a,10,prep;train\n")
    result = replay(table, cluster="v100:2")

    assert [table.job_id[k].tolist() for k in map(table.after.of, range(3))] == [[], ["prep"], ["prep", "train"]]
    assert result.first_start_s.tolist() == [0.0, 720.0, 1080.0]


def test_a_cycle_in_the_trace_is_an_error_naming_the_file_and_the_jobs(tmp_path):
    with pytest.raises(InputError) as err:
        read(tmp_path, "a,0,1,1,a,10,\nb,0,1,1,a,10,d\nc,0,1,1,a,10,b\nd,0,1,1,a,10,c;a\n")

    assert str(err.value) == (f"{tmp_path / 'trace.csv'}:3: field 'after': jobs 'b', 'c', 'd' wait for each other "
                              "in a cycle: none of them could ever start")


@pytest.mark.parametrize("after, message", [
    ("x", "3: field 'after': no job 'x' in the trace"),
    ("a;b", "3: field 'after': job 'b' cannot wait for itself"),
])
def test_an_after_naming_no_job_or_the_job_itself_is_an_error(tmp_path, after, message):
    with pytest.raises(InputError, match=message):
        read(tmp_path, f"a,0,1,1,a,10,\nb,0,1,1,a,10,{after}\n")


def test_a_job_cut_out_of_the_window_is_waited_for_no_more(tmp_path):
    table = read(tmp_path, "a,0,1,1,a,10,\nb,100,1,1,a,10,a\nc,200,1,1,a,10,b\n", start_s=50.0)

    assert table.job_id.tolist() == ["b", "c"]
    assert [table.after.of(i).tolist() for i in range(2)] == [[], [0]]


def test_a_trace_keeps_each_jobs_after_and_its_cores_and_memory_together_through_a_window(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,kind,steps,after,cpus,memory_gib\n"
                    "a,0,1,1,a,10,,1,2\nb,100,1,1,a,10,a,4,\nc,200,1,1,a,10,b,,16\n")
    table = read_workload_csv(path, throughputs=ONE_STEP_A_SECOND, start_s=50.0)

    assert table.job_id.tolist() == ["b", "c"]
    assert [table.after.of(i).tolist() for i in range(2)] == [[], [0]]
    assert (table.cpus.tolist(), table.memory_gib.tolist()) == ([4.0, 0.0], [0.0, 16.0])
    later = table.take(np.array([1]))
    assert (later.after.of(0).tolist(), later.cpus.tolist(), later.memory_gib.tolist()) == ([], [0.0], [16.0])
