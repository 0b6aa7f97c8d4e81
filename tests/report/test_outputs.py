"""write_run and write_comparison: the files a replay leaves behind, and what is in them
(report.html's content: tests/report/test_html.py)."""

import csv
import json

import numpy as np
import pytest

from apportion.core import JobTable, ThroughputTable
from apportion.core.cluster import parse_cluster_shorthand
from apportion.policies import make_policy
from apportion.report import unschedulable_lines, write_comparison, write_run
from apportion.report.outputs import gpu_type_labels
from apportion.sim import simulate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_result(policy: str = "fifo", job_ids=("j1", "j2", "j3")):
    """Two jobs that run for an hour each on 2 v100 + 2 k80, and one asking for 16 GPUs (unschedulable)."""
    table = ThroughputTable(("a",), ("v100", "k80"), (1, 2, 4, 8), np.array([[[1.0, 2, 4, 8], [0.5, 1, 2, 4]]]))
    jobs = JobTable.build(
        job_id=list(job_ids),
        submit_time_s=[0, 0, 100],
        kind_names=["a"] * 3,
        num_gpus=[1, 2, 16],
        total_steps=[3600, 3600, 10],
        kinds=("a",),
    )
    return simulate(jobs, parse_cluster_shorthand("v100:2,k80:2"), table, make_policy(policy))


def read_csv(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "nested" / "fifo"  # parents are created
    result = tiny_result()
    paths = write_run(result, out)
    return result, out, paths


def test_write_run_writes_five_files(run_dir):
    _, out, paths = run_dir

    names = sorted(p.name for p in paths)

    assert names == ["jobs.csv", "report.html", "report.png", "summary.json", "timeline.csv"]
    assert all(p.parent == out and p.is_file() for p in paths)


def test_summary_json_round_trips(run_dir):
    result, out, _ = run_dir

    summary = json.loads((out / "summary.json").read_text())

    assert summary == result.summary
    assert list(summary) == list(result.summary)  # insertion order kept


def test_jobs_csv_has_one_row_per_job(run_dir):
    _, out, _ = run_dir

    rows = read_csv(out / "jobs.csv")

    assert [r["job_id"] for r in rows] == ["j1", "j2", "j3"]
    assert list(rows[0]) == [
        "job_id", "kind", "num_gpus", "submit_s", "start_s", "finish_s", "jct_s", "queueing_s",
        "gpu_types", "preemptions", "moves", "steps_done", "total_steps", "status", "deadline_s",
        "unschedulable_reason",
    ]
    assert {r["kind"] for r in rows} == {"a"}
    assert [int(r["num_gpus"]) for r in rows] == [1, 2, 16]


def test_unschedulable_job_has_empty_times(run_dir):
    _, out, _ = run_dir

    j3 = read_csv(out / "jobs.csv")[2]

    assert j3["status"] == "unschedulable"
    assert j3["start_s"] == j3["finish_s"] == j3["jct_s"] == j3["queueing_s"] == ""
    assert j3["gpu_types"] == ""
    assert float(j3["submit_s"]) == 100.0


def test_jobs_that_can_never_run_say_why_in_jobs_csv_and_under_the_summary(tmp_path):
    table = ThroughputTable(("a", "b"), ("v100", "k80"), (1, 2, 4, 8, 16),
                            np.array([[[1.0, 2, 4, 8, 16], [0.5, 1, 2, 4, 8]], [[np.nan] * 5, [np.nan] * 5]]))
    jobs = JobTable.build(job_id=["fits", "too-big", "b-job"], submit_time_s=[0, 0, 0], kind_names=["a", "a", "b"],
                          num_gpus=[1, 16, 1], total_steps=[3600, 10, 10], kinds=("a", "b"))
    result = simulate(jobs, parse_cluster_shorthand("v100:2,k80:4"), table, make_policy("fifo"))
    write_run(result, tmp_path)

    rows = {r["job_id"]: r for r in read_csv(tmp_path / "jobs.csv")}
    assert rows["fits"]["unschedulable_reason"] == ""
    assert rows["too-big"]["unschedulable_reason"] == "needs 16 GPUs; the largest type that runs a has 4 (k80)"
    assert rows["b-job"]["unschedulable_reason"] == "no GPU type in the cluster runs b"
    assert unschedulable_lines(result) == [
        "2 unschedulable jobs under fifo:",
        "  too-big: needs 16 GPUs; the largest type that runs a has 4 (k80)",
        "  b-job: no GPU type in the cluster runs b",
    ]


def test_completed_jobs_jct_is_finish_minus_submit(run_dir):
    _, out, _ = run_dir

    completed = [r for r in read_csv(out / "jobs.csv") if r["status"] == "completed"]

    assert len(completed) == 2
    for r in completed:
        assert float(r["jct_s"]) == pytest.approx(float(r["finish_s"]) - float(r["submit_s"]), abs=1e-3)
        assert float(r["queueing_s"]) == pytest.approx(float(r["start_s"]) - float(r["submit_s"]), abs=1e-3)
        assert float(r["steps_done"]) == float(r["total_steps"])
        assert r["gpu_types"] in {"v100", "k80", "v100+k80"}


def test_timeline_utilization_is_a_fraction_of_the_cluster(run_dir):
    result, out, _ = run_dir

    rows = read_csv(out / "timeline.csv")

    assert len(rows) == len(result.timeline) > 0
    assert list(rows[0]) == ["time_s", "busy_gpus", "utilization", "running_jobs", "queued_jobs"]
    for r in rows:
        assert 0.0 <= float(r["utilization"]) <= 1.0
        assert float(r["utilization"]) == pytest.approx(int(r["busy_gpus"]) / 4, abs=1e-6)


def test_report_png_is_a_real_png(run_dir):
    _, out, _ = run_dir

    data = (out / "report.png").read_bytes()

    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000


def test_write_comparison_names_every_policy(tmp_path):
    results = [tiny_result("fifo"), tiny_result("las")]

    paths = write_comparison(results, tmp_path / "cmp")

    assert sorted(p.name for p in paths) == ["comparison.json", "comparison.png", "jobs.csv", "report.html"]
    document = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert [s["policy"] for s in document["policies"]] == ["fifo", "las"]
    assert document["policies"][0] == results[0].summary
    png = (tmp_path / "cmp" / "comparison.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_a_comparisons_jobs_csv_names_every_policys_unschedulable_jobs(tmp_path):
    write_comparison([tiny_result("fifo"), tiny_result("las")], tmp_path)

    rows = read_csv(tmp_path / "jobs.csv")
    assert [(r["policy"], r["job_id"]) for r in rows] == [(p, j) for p in ("fifo", "las") for j in ("j1", "j2", "j3")]
    unschedulable = [(r["policy"], r["job_id"]) for r in rows if r["unschedulable_reason"]]
    assert unschedulable == [("fifo", "j3"), ("las", "j3")]


def test_job_ids_with_commas_and_quotes_are_quoted(tmp_path):
    odd_ids = ["a,b", 'say "hi"', "plain"]

    write_run(tiny_result(job_ids=odd_ids), tmp_path)

    assert [r["job_id"] for r in read_csv(tmp_path / "jobs.csv")] == odd_ids


def test_gpu_type_labels_join_types_in_cluster_order():
    seconds_on = np.array([[5.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [5.0, 0.0, 1.0]])

    labels = gpu_type_labels(seconds_on, ("v100", "p100", "k80"))

    assert labels.tolist() == ["v100+k80", "", "p100", "v100+k80"]


def test_empty_result_still_writes_everything(tmp_path):
    result = tiny_result()
    empty = type(result)(
        policy="fifo", jobs=result.jobs.take(slice(0, 0)), cluster=result.cluster,
        status=result.status[:0], first_start_s=result.first_start_s[:0], finish_s=result.finish_s[:0],
        preemptions=result.preemptions[:0], moves=result.moves[:0], steps_done=result.steps_done[:0],
        time_on_type=result.time_on_type[:0], timeline=np.zeros((0, 4)), summary={"policy": "fifo", "jobs": 0},
    )

    paths = write_run(empty, tmp_path)

    assert len(paths) == 5
    assert read_csv(tmp_path / "jobs.csv") == []
    assert read_csv(tmp_path / "timeline.csv") == []
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_MAGIC)
