"""The dashboard in a real headless Chromium against a running server (uvicorn on loopback) whose
jobs are fake and end when the test says: it shows the GPUs and the jobs, follows them live,
and a cancel without a credential is refused. One browser and one server for the module;
each test opens its own page and saves a screenshot. (The page's Content-Security-Policy allows
no eval, so the tests wait on selectors, not on JavaScript strings.)"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from live_server import LiveServer
from serve_helpers import wait_for

from apportion.serve.store.state import StateStore

JOBS = (("cnn", "ann"), ("lm", "bob"), ("gan", "ann"), ("rl", "bob"))  # ids 1-4: three run, rl waits
REFRESH_MS = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = LiveServer(tmp_path_factory.mktemp("state"), slots="cpu:2,v100:1", users=("ann", "bob")).start()
    for name, user in JOBS:
        live.submit(name, user)
    try:
        yield live
    finally:
        live.stop()


def open_dashboard(page, server: LiveServer):
    page.on("dialog", lambda dialog: dialog.accept())  # "Cancel job N?"
    page.goto(f"{server.url}/?every={REFRESH_MS}")
    page.wait_for_selector("#jobs tbody tr[data-job='4']")
    return page


def running_on(server: LiveServer, job_id: int) -> str:
    """Wait for job ``job_id`` to hold a slot and return it."""
    with server.scheduler.lock:
        server.scheduler.tick()
    row = server.store.job(job_id)
    assert row.status == "running", row
    return row.slots


def test_the_dashboard_shows_the_gpus_and_the_jobs_and_follows_a_job_that_finishes(page, server, tmp_path):
    slot = running_on(server, 1)

    open_dashboard(page, server)
    page.wait_for_selector(f"[data-slot='{slot}'] [data-job='1']")
    page.wait_for_selector("#load-chart .main-svg")
    page.screenshot(path=tmp_path / "dashboard.png", full_page=True)

    assert page.locator("[data-gpu-type]").evaluate_all("types => types.map(t => t.dataset.gpuType)") == ["cpu", "v100"]
    assert page.locator("[data-slot]").count() == 3
    names = {row.get_attribute("data-job"): row.locator("td").nth(1).inner_text()
             for row in page.locator("#jobs tbody tr").all()}
    assert {names[str(i + 1)] for i in range(len(JOBS))} == {name for name, _ in JOBS}
    assert "reading without a credential" in page.inner_text("#viewer")

    server.finish(1, 0)  # no reload: the page sees it at its next refresh

    page.wait_for_selector("#jobs tbody tr[data-job='1'][data-status='completed']")
    page.wait_for_selector(f"[data-slot='{slot}'] [data-job='1']", state="detached")
    page.screenshot(path=tmp_path / "dashboard-finished.png", full_page=True)
    assert "1 completed" in page.inner_text("#server-line")
    assert page.errors == []


def test_a_cancel_without_a_credential_is_refused_and_with_the_owners_it_works(page, server, tmp_path):
    running_on(server, 2)
    open_dashboard(page, server)

    page.click("#jobs tbody tr[data-job='2'] button[data-cancel]")
    page.wait_for_selector("#message.error")
    page.screenshot(path=tmp_path / "dashboard-refused.png", full_page=True)

    assert "refused (401)" in page.inner_text("#message")
    assert server.status_of(2) == "running"
    assert all("401" in error for error in page.errors)  # the refused request, and nothing else

    page.fill("#token", server.credential["bob"])
    page.click("#credential-use")
    page.wait_for_selector("#viewer:has-text('you are bob')")
    page.click("#jobs tbody tr[data-job='2'] button[data-cancel]")
    page.wait_for_selector("#jobs tbody tr[data-job='2'][data-status='cancelled']")
    page.screenshot(path=tmp_path / "dashboard-cancelled.png", full_page=True)
    assert server.status_of(2) == "cancelled"
    assert "Job 2 cancelled" in page.inner_text("#message")


def test_a_jobs_detail_shows_its_throughput_events_and_to_its_owner_its_log(page, server, tmp_path):
    running_on(server, 3)
    attempt = server.executor.envs[(3, 1)]["APPORTION_TOKEN"]
    for steps in (100, 200, 300):
        answer = httpx.post(f"{server.url}/jobs/3/progress", json={"attempt": 1, "steps_done": steps, "steps_per_s": 10.0},
                            headers={"Authorization": f"Bearer {attempt}"})
        assert answer.status_code == 200, answer.text
    server.executor.logs[(3, 1)] = "epoch 1: loss 2.31\nepoch 2: loss 1.87"
    open_dashboard(page, server)

    page.click("#jobs tbody tr[data-job='3'] td >> nth=1")
    page.wait_for_selector("#detail:not([hidden]) #events li[data-event='start']")
    assert "only ann or an admin" in page.inner_text("#log")
    page.fill("#token", server.credential["ann"])
    page.click("#credential-use")
    page.wait_for_selector("#log:has-text('loss 1.87')")
    page.wait_for_selector("#throughput-chart .main-svg")
    page.screenshot(path=tmp_path / "dashboard-detail.png", full_page=True)

    assert page.inner_text("#detail-title") == "Job 3: gan"
    # from the attempt's start, at the rate of each report (3 reports of 10 steps/s)
    assert page.evaluate("document.getElementById('throughput-chart').data[0].y") == [10.0] * 4
    assert page.errors == []


def test_a_restarted_servers_page_goes_back_before_its_start_with_one_clock_everywhere(page, tmp_path):
    state = tmp_path / "state"
    earlier = StateStore(state / "state.db")  # the samples of a server that ran here an hour ago
    an_hour_ago = time.time() - 3600
    for i in range(5):
        earlier.put_sample(an_hour_ago + 5 * i, 1, 1, {"cpu": 1})
    earlier.close()
    live = LiveServer(state, slots="cpu:1").start()
    try:
        first = live.submit("first", "ann")
        live.submit("second", "bob")
        wait_for(lambda: live.status_of(first) == "running", 20, "job 1 to start")
        live.finish(first, 0)
        wait_for(lambda: live.status_of(2) == "running", 20, "job 2 to start")
        open_dashboard_on(page, live, 2)
        page.wait_for_selector("#jobs tbody tr[data-job='1'][data-status='completed']")
        page.wait_for_selector("#load-chart .main-svg")
        page.click("#jobs tbody tr[data-job='1'] td >> nth=1")
        page.wait_for_selector("#detail:not([hidden]) #events li[data-event='exit']")
        page.screenshot(path=tmp_path / "dashboard-restarted.png", full_page=True)
        rows = {j["id"]: j for j in httpx.get(f"{live.url}/jobs").json()}
        chart = page.locator("#load-chart").evaluate("plot => plot.data.map(trace => "
                                                     "[trace.x[0].getTime() / 1000, trace.y.includes(null)])")
        cells = {row.get_attribute("data-job"): row.locator("td").all_inner_texts()
                 for row in page.locator("#jobs tbody tr").all()}
        events = page.locator("#events li time").all_inner_texts()
        event_lines = page.locator("#events li").all_inner_texts()
        header = page.locator("#jobs thead th").all_inner_texts()
        errors = list(page.errors)
    finally:
        page.goto("about:blank")  # no more polling of a server about to stop
        live.stop()

    assert all(abs(start - an_hour_ago) < 0.01 and broken for start, broken in chart)  # from before, a break since
    submitted, finish = header.index("submitted"), header.index("finish")
    assert cells["1"][submitted] == local_clock(rows["1"]["submitted"])
    assert cells["1"][finish] == local_clock(rows["1"]["finished"])
    assert re.fullmatch(r"—|~\d\d:\d\d:\d\d", cells["2"][finish])  # running: about when it should end, if known
    assert events and all(re.fullmatch(r"\d\d:\d\d:\d\d", shown) for shown in events)
    assert not any(re.search(r"\d{9}", line) for line in event_lines)  # no Unix seconds
    assert errors == []


def open_dashboard_on(page, live: LiveServer, last_job: int):
    page.goto(f"{live.url}/?every={REFRESH_MS}")
    page.wait_for_selector(f"#jobs tbody tr[data-job='{last_job}']")


def local_clock(seconds: float) -> str:
    """The page's clock for a time of today: 24-hour local time."""
    return time.strftime("%H:%M:%S", time.localtime(seconds))
