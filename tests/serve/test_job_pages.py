"""Lists of jobs come a page at a time: `GET /jobs` sends at most PAGE_MAX jobs and names where the next
page starts; the Python client and `apportion queue` (--json, --all, --array) follow the pages and list
every job, exactly as the API shows it."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.serve.views import job_list
from apportion.serve.client import NEXT_PAGE, Client
from live_server import LiveServer
from serve_helpers import wait_for

runner = CliRunner()
PAGE = 4


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A live server with 2 slots, one page PAGE jobs long; 3 single jobs (1-3), an array 4 of 6 tasks
    (5-10), one more job (11) and an array 12 of 3 tasks (13-15)."""
    monkeypatch.setattr(job_list, "PAGE_MAX", PAGE)
    live = LiveServer(tmp_path / "state", slots="cpu:2").start()
    submit = live.scheduler.submit
    for name in ("a", "b", "c"):
        submit({"name": name, "command": "python train.py", "total_steps": 100, "user": "ann"}, "ann")
    submit({"name": "sweep", "command": "python train.py", "total_steps": 100, "user": "ann", "array": "0-5"}, "ann")
    submit({"name": "d", "command": "python train.py", "total_steps": 100, "user": "bob"}, "bob")
    submit({"name": "grid", "command": "python train.py", "total_steps": 100, "user": "bob", "array": "0-2"}, "bob")
    wait_for(lambda: live.status_of(1) == live.status_of(2) == "running", 10, "jobs 1 and 2 to start")
    yield live
    live.stop()


def ids(jobs) -> list[int]:
    return [int(j["id"]) for j in jobs]


def test_get_jobs_sends_one_page_and_names_where_the_next_starts(server):
    with Client(server.url) as client:
        first, headers = client._answer("GET", "/jobs")
        second, more = client._answer("GET", "/jobs", params={"after_id": headers[NEXT_PAGE]})
        asked, _ = client._answer("GET", "/jobs", params={"limit": 100})  # more than a page: still a page
        last, end = client._answer("GET", "/jobs", params={"after_id": 13})

    assert ids(first) == [1, 2, 3, 5] and headers[NEXT_PAGE] == "5"
    assert ids(second) == [6, 7, 8, 9] and more[NEXT_PAGE] == "9"
    assert ids(asked) == [1, 2, 3, 5]
    assert ids(last) == [14, 15] and end.get(NEXT_PAGE) is None  # the last page says so


def test_the_client_follows_the_pages_to_every_job_and_stops_at_its_limit(server):
    with Client(server.url) as client:
        every = client.jobs()
        bobs = client.jobs(user="bob")
        first = client.jobs(limit=6)
        sweep = client.jobs(array=4)

    assert ids(every) == [1, 2, 3, *range(5, 12), 13, 14, 15]
    assert ids(bobs) == [11, 13, 14, 15]
    assert ids(first) == [1, 2, 3, 5, 6, 7]
    assert ids(sweep) == list(range(5, 11)) and {j["array_id"] for j in sweep} == {"4"}


def test_queue_json_lists_every_job_over_pages_exactly_as_the_api_shows_it(server):
    listed = runner.invoke(app, ["queue", "--json", "--server", server.url])
    every = runner.invoke(app, ["queue", "--json", "--all", "--server", server.url])

    assert listed.exit_code == 0, listed.output
    jobs = json.loads(listed.output)
    assert ids(jobs) == [1, 2, 3, *range(5, 12), 13, 14, 15]
    with Client(server.url) as client:
        shown = {j["id"]: j for j in client.jobs()}
    for job in jobs:  # the same fields and values, but the running time, which goes on
        assert {k: v for k, v in job.items() if k != "runtime_s"} == {
            k: v for k, v in shown[job["id"]].items() if k != "runtime_s"}
    assert ids(json.loads(every.output)) == ids(jobs)


def test_queue_array_lists_that_arrays_tasks_only(server):
    sweep = runner.invoke(app, ["queue", "--array", "4", "--server", server.url])
    grid = runner.invoke(app, ["queue", "--array", "12", "--json", "--server", server.url])
    none = runner.invoke(app, ["queue", "--array", "x1", "--server", server.url])

    assert sweep.exit_code == 0, sweep.output
    assert re.findall(r"sweep\[\d\]", sweep.output) == [f"sweep[{i}]" for i in range(6)]
    assert "grid" not in sweep.output and " a " not in sweep.output
    assert [(j["id"], j["array_index"]) for j in json.loads(grid.output)] == [("13", 0), ("14", 1), ("15", 2)]
    assert none.exit_code == 0 and "no tasks of array x1" in none.output


def test_the_page_bounds_and_the_cursor_are_checked(server):
    with Client(server.url) as client:
        for params, field in (({"after_id": -1}, "after_id"), ({"array": 0}, "array"), ({"array": "x"}, "array")):
            with pytest.raises(Exception) as refused:
                client._answer("GET", "/jobs", params=params)
            assert refused.value.status == 400 and field in str(refused.value)
