"""`apportion queue`'s collapsing of job arrays into one line each, on rows worked out by hand."""

from apportion.cli.arrays import collapse_arrays, index_ranges


def task(job_id, index, status, steps_done, runtime_s, reason="", finished=None, alloc=""):
    return {"id": str(job_id), "name": f"sweep[{index}]", "user": "ann", "queue": "", "priority": 1.0,
            "status": status, "reason": reason, "gpus": 1, "alloc": alloc, "submitted": 100.0 + index,
            "finished": finished, "runtime_s": runtime_s, "steps_done": steps_done, "total_steps": 10,
            "estimated_finish": None, "hangs": 0, "last_lines": "", "array_id": "12", "array_index": index}


ALONE = {"id": "11", "name": "prep", "status": "completed", "array_id": None, "array_index": None}


def test_an_arrays_tasks_become_one_line_where_its_first_task_stood():
    jobs = [ALONE,
            task(13, 0, "completed", 10, 60.0, finished=200.0),
            task(14, 1, "running", 4, 30.0, alloc="cpu:0"),
            task(15, 2, "running", 2, 15.0, alloc="cpu:1"),
            task(16, 3, "queued", 0, 0.0, reason="waiting for its first round"),
            {**ALONE, "id": "17", "name": "report", "status": "queued"}]

    rows = collapse_arrays(jobs)

    assert [row["id"] for row in rows] == ["11", "12[0-3]", "17"]
    array = rows[1]
    assert array["name"] == "sweep"
    assert array["status"] == "running 2, queued 1, completed 1"
    assert array["reason"] == "[3] waiting for its first round"
    assert (array["steps_done"], array["total_steps"], array["runtime_s"]) == (16, 40, 105.0)
    assert (array["alloc"], array["submitted"], array["finished"], array["tasks"]) == ("cpu:0,cpu:1", 100.0, None, 4)


def test_jobs_outside_arrays_pass_through_unchanged():
    assert collapse_arrays([ALONE]) == [ALONE]


def test_indices_are_written_as_ranges_of_consecutive_ones():
    assert index_ranges([0, 1, 2, 3]) == "0-3"
    assert index_ranges([7, 1, 3, 5, 6]) == "1,3,5-7"
    assert index_ranges([0, 2, 4]) == "0,2,4"
    assert index_ranges([]) == ""
