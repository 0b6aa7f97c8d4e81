"""summary_table, format_duration and unschedulable_lines: what a person reads in the terminal."""

import math

import numpy as np
import pytest
from rich.console import Console

from apportion.core import JobTable, ThroughputTable
from apportion.core.cluster import parse_cluster_shorthand
from apportion.policies import make_policy
from apportion.report import format_duration, summary_table, unschedulable_lines
from apportion.sim import simulate


def render(table) -> str:
    console = Console(record=True, width=120)
    console.print(table)
    return console.export_text()


def summary(policy: str, avg_jct_s: float, utilization: float) -> dict:
    return {
        "policy": policy, "cluster": "v100:2,k80:2", "jobs": 1200, "completed": 1190, "unschedulable": 10,
        "avg_jct_s": avg_jct_s, "p50_jct_s": 42.0, "p99_jct_s": 4.2 * 86400, "makespan_s": 7560.0,
        "avg_queueing_s": 210.0, "utilization": utilization, "preemptions": 3, "sim_wall_s": 0.25,
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (math.nan, "—"),
        (0, "0 s"),
        (0.25, "250 ms"),
        (4.24, "4.2 s"),
        (42, "42 s"),
        (59.4, "59 s"),
        (90, "1.5 min"),
        (210, "3.5 min"),
        (3600, "1.0 h"),
        (7560, "2.1 h"),
        (4.2 * 86400, "4.2 d"),
        (-90, "-1.5 min"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_format_duration_never_shows_sixty_of_a_unit():
    assert format_duration(59.7) == "1.0 min"
    assert format_duration(3598) == "1.0 h"
    assert format_duration(86300) == "1.0 d"


def test_one_summary_is_a_metric_value_table():
    table = summary_table([summary("fifo", 3600.0, 0.75)])

    text = render(table)

    assert len(table.columns) == 2
    assert "fifo" in text
    for expected in ("1,200", "1,190", "1.0 h", "42 s", "4.2 d", "2.1 h", "3.5 min", "75.0%", "250 ms"):
        assert expected in text
    for metric in ("avg JCT", "p50 JCT", "p99 JCT", "makespan", "avg queueing", "utilization", "sim wall time"):
        assert metric in text


def test_several_summaries_sit_side_by_side():
    table = summary_table([summary("fifo", 3600.0, 0.75), summary("las", 1800.0, 0.8)], title="policies")

    text = render(table)

    assert len(table.columns) == 3
    assert "policies" in text
    header = next(line for line in text.splitlines() if "fifo" in line)
    assert header.index("fifo") < header.index("las")
    avg_row = next(line for line in text.splitlines() if "avg JCT" in line)
    assert "1.0 h" in avg_row and "30.0 min" in avg_row


def test_missing_metrics_show_a_dash():
    text = render(summary_table([{"policy": "srtf", "jobs": 0, "completed": 0, "avg_jct_s": None}]))

    avg_row = next(line for line in text.splitlines() if "avg JCT" in line)
    assert "—" in avg_row


def replay(num_gpus: list[int]):
    table = ThroughputTable(("a",), ("v100",), (1, 2, 4, 8), np.array([[[1.0, 2, 4, 8]]]))
    jobs = JobTable.build(job_id=[f"j{i}" for i in range(len(num_gpus))], submit_time_s=[0.0] * len(num_gpus),
                          kind_names=["a"] * len(num_gpus), num_gpus=num_gpus, total_steps=[60.0] * len(num_gpus),
                          kinds=("a",))
    return simulate(jobs, parse_cluster_shorthand("v100:4"), table, make_policy("fifo"))


def test_no_lines_when_every_job_could_run():
    assert unschedulable_lines(replay([1, 4])) == []


def test_the_first_unschedulable_jobs_are_named_and_the_rest_counted():
    lines = unschedulable_lines(replay([1] + [8] * 7), limit=5)
    assert lines[0] == "7 unschedulable jobs under fifo:"
    assert lines[1:6] == [f"  j{i}: needs 8 GPUs; the largest type that runs a has 4 (v100)" for i in range(1, 6)]
    assert lines[6:] == ["  … and 2 more (with --out, jobs.csv names them all, in column unschedulable_reason)"]
