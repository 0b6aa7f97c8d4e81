"""The dashboard's page and JSON (apportion/serve/http/dashboard.py) through FastAPI's TestClient, over a
fake executor: what it shows, and who may read it (tests/serve/test_dashboard_browser.py drives the
page itself in a real browser)."""

from __future__ import annotations


from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.http.dashboard import sample
from apportion.serve.views.history import History
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

LOCAL = ("127.0.0.1", 50000)
REMOTE = ("203.0.113.7", 50000)


def job(name: str, user: str) -> dict:
    return {"name": name, "command": "python train.py", "total_steps": 100, "user": user}


class Server:
    """A scheduler over 2 CPU slots and 1 v100 with fake jobs; ``client(...)`` calls from an address."""

    def __init__(self, tmp_path, users=()) -> None:
        self.store = StateStore(tmp_path / "state.db")
        self.executor = FakeExecutor(tmp_path)
        self.scheduler = Scheduler(self.store, self.executor, parse_slots("cpu:2,v100:1"), Las(),
                                   ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0))
        self.history = History()
        self.app = create_app(self.scheduler, None, self.history)
        self.credential = {name: add_user(self.store, name, admin=name == "root", now=0.0) for name in users}

    def client(self, address=LOCAL, who: str | None = None) -> TestClient:
        headers = {"Authorization": f"Bearer {self.credential.get(who, who)}"} if who else {}
        return TestClient(self.app, client=address, headers=headers)


def test_the_page_is_served_at_the_root_with_its_own_scripts_only(tmp_path):
    page = Server(tmp_path).client().get("/")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/dashboard/assets/dashboard.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from another site


def test_plotly_js_comes_from_the_plotly_package_compressed_when_the_browser_accepts_it(tmp_path):
    client = Server(tmp_path).client()

    plain = client.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "identity"})
    packed = client.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "gzip"})

    assert plain.headers["content-type"].startswith("text/javascript") and b"plotly.js" in plain.content[:200]
    assert packed.headers["content-encoding"] == "gzip" and packed.content == plain.content  # httpx unpacks it
    assert client.get("/dashboard/assets/dashboard.js").status_code == 200
    assert client.get("/dashboard/assets/state.db").status_code == 404


def test_the_state_shows_each_slot_with_its_job_and_the_queue_with_reasons(tmp_path):
    server = Server(tmp_path)
    for name in ("one", "two", "three", "four"):
        server.scheduler.submit(job(name, "ann"), "ann")
    server.scheduler.tick()

    state = server.client().get("/dashboard/state").json()

    assert [(s["id"], s["gpu_type"], s["jobs"]) for s in state["slots"]] == [
        ("cpu:0", "cpu", ["1"]), ("cpu:1", "cpu", ["2"]), ("gpu:0", "v100", ["3"])]
    assert state["gpu_types"] == [{"name": "cpu", "slots": 2, "busy": 2}, {"name": "v100", "slots": 1, "busy": 1}]
    waiting = state["jobs"][3]
    assert (waiting["id"], waiting["status"], waiting["reason"], waiting["slots"]) == (
        "4", "queued", "waiting for slots", [])
    assert state["server"]["policy"] == "las" and state["server"]["counts"]["running"] == 3
    assert state["viewer"] == {"credentials": False, "user": None, "admin": False, "anonymous": False}


def test_the_cluster_over_time_is_what_was_sampled(tmp_path):
    server = Server(tmp_path)
    for name in ("one", "two", "three", "four"):
        server.scheduler.submit(job(name, "ann"), "ann")
    sample(server.scheduler, server.history, now=100.0)
    server.scheduler.tick()
    sample(server.scheduler, server.history, now=101.0)

    history = server.client().get("/dashboard/state").json()["history"]

    assert history == {"t": [100.0, 101.0], "queued": [4, 1], "running": [0, 3],
                       "busy": {"cpu": [0, 2], "v100": [0, 1]}}


def test_a_jobs_detail_has_its_events_its_reported_progress_and_its_log(tmp_path):
    server = Server(tmp_path)
    server.scheduler.submit(job("one", "ann"), "ann")
    server.scheduler.tick()
    client = server.client()
    client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 40, "steps_per_s": 8.0})
    server.executor.logs[(1, 1)] = "step 40 loss 0.5"

    detail = client.get("/dashboard/jobs/1").json()

    assert detail["job"]["steps_done"] == 40 and detail["job"]["slots"] == ["cpu:0"]
    assert [e["event"] for e in detail["events"]] == ["submit", "start"]
    assert detail["progress"]["steps_done"] == [40] and detail["progress"]["steps_per_s"] == [8.0]
    assert detail["log"] == {"shown": True, "attempt": 1, "text": "step 40 loss 0.5"}
    assert client.get("/dashboard/jobs/9").status_code == 404
    assert client.get("/dashboard/jobs/x1").status_code == 404


def test_with_credentials_on_this_machine_reads_without_one_and_sees_no_ones_log(tmp_path):
    server = Server(tmp_path, users=("ann", "bob"))
    server.scheduler.submit(job("one", "ann"), "ann")
    server.scheduler.tick()
    server.executor.logs[(1, 1)] = "secret line"

    anonymous = server.client(LOCAL)
    state = anonymous.get("/dashboard/state")
    detail = anonymous.get("/dashboard/jobs/1").json()

    assert state.status_code == 200 and state.json()["slots"][0]["jobs"] == ["1"]
    assert state.json()["viewer"] == {"credentials": True, "user": None, "admin": False, "anonymous": True}
    assert detail["log"]["shown"] is False and "secret" not in str(detail)
    assert anonymous.get("/jobs").status_code == 401  # the API itself still asks for a credential
    assert server.client(LOCAL, "bob").get("/dashboard/jobs/1").json()["log"]["shown"] is False
    assert server.client(LOCAL, "ann").get("/dashboard/jobs/1").json()["log"]["text"] == "secret line"


def test_from_another_machine_reading_needs_a_credential(tmp_path):
    server = Server(tmp_path, users=("ann",))

    refused = server.client(REMOTE).get("/dashboard/state")

    assert refused.status_code == 401 and "credential" in refused.json()["detail"]
    assert server.client(REMOTE, "ann").get("/dashboard/state").json()["viewer"]["user"] == "ann"
    assert server.client(LOCAL, "u1." + "0" * 64).get("/dashboard/state").status_code == 401  # a wrong one is refused
    assert server.client(REMOTE).get("/").status_code == 200  # the page itself holds nothing


def test_an_attempts_credential_may_not_read_the_dashboard(tmp_path):
    server = Server(tmp_path, users=("ann",))
    server.scheduler.submit(job("one", "ann"), "ann")
    server.scheduler.tick()
    attempt = server.executor.envs[(1, 1)]["APPORTION_TOKEN"]

    assert server.client(REMOTE, attempt).get("/dashboard/state").status_code == 403


def test_cancelling_from_the_dashboard_is_the_apis_cancel_and_needs_its_credential(tmp_path):
    server = Server(tmp_path, users=("ann", "bob"))
    server.scheduler.submit(job("one", "ann"), "ann")

    assert server.client(LOCAL).post("/jobs/1/cancel", json={}).status_code == 401
    assert server.client(LOCAL, "bob").post("/jobs/1/cancel", json={}).status_code == 403
    assert server.store.job(1).status == "queued"
    state = server.client(LOCAL, "bob").get("/dashboard/state").json()
    assert state["jobs"][0]["may_cancel"] is False
    assert server.client(LOCAL, "ann").post("/jobs/1/cancel", json={}).status_code == 200
    assert server.store.job(1).status == "cancelled"


def test_the_list_holds_the_running_jobs_the_first_waiting_and_the_last_finished_with_counts_for_the_rest(
        tmp_path, monkeypatch):
    from apportion.serve.http import dashboard

    monkeypatch.setattr(dashboard, "FINISHED_SHOWN", 2)
    monkeypatch.setattr(dashboard, "WAITING_SHOWN", 2)
    server = Server(tmp_path)
    for name in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j"):
        server.scheduler.submit(job(name, "ann"), "ann")
    for job_id in (1, 2, 3):
        server.scheduler.cancel(job_id, "ann")
    server.scheduler.tick()  # 4, 5 and 6 run; 7 to 10 wait

    state = server.client().get("/dashboard/state").json()

    assert [(j["id"], j["status"]) for j in state["jobs"]] == [
        ("2", "cancelled"), ("3", "cancelled"), ("4", "running"), ("5", "running"), ("6", "running"),
        ("7", "queued"), ("8", "queued")]
    assert state["finished_not_shown"] == 1
    assert state["waiting_not_shown"] == 2  # 9 and 10: the page says "And 2 more waiting"


def test_an_anonymous_reader_gets_a_bounded_view_made_once_a_round(tmp_path):
    server = Server(tmp_path, users=("ann",))
    server.scheduler.submit({**job("many", "ann"), "array": "0-299"}, "ann")
    server.scheduler.tick()
    anonymous = server.client(LOCAL)

    first = anonymous.get("/dashboard/state").json()
    server.scheduler.submit(job("late", "ann"), "ann")
    again = anonymous.get("/dashboard/state").json()
    server.scheduler.tick(now=server.scheduler.round_end)  # the next round
    next_round = anonymous.get("/dashboard/state").json()

    from apportion.serve.http.dashboard import WAITING_SHOWN
    assert len(first["jobs"]) == 3 + WAITING_SHOWN and first["waiting_not_shown"] == 300 - 3 - WAITING_SHOWN
    assert again == first  # the same view while the round lasts, whatever happened meanwhile
    assert next_round["server"]["counts"]["queued"] == 300 - 3 + 1 and next_round["waiting_not_shown"] == 198
    ann = server.client(LOCAL, "ann").get("/dashboard/state").json()  # a reader with a credential: as it is now
    assert len(ann["jobs"]) == len(first["jobs"]) and ann["viewer"]["user"] == "ann"


def test_a_restarted_server_shows_the_cluster_before_its_start(tmp_path):
    first = Server(tmp_path)
    first.history = History(store=first.store)
    first.scheduler.submit(job("one", "ann"), "ann")
    sample(first.scheduler, first.history, now=100.0)
    first.store.close()

    second = Server(tmp_path)  # the same state directory
    second.app = create_app(second.scheduler, None, History(store=second.store))
    history = second.client().get("/dashboard/state").json()["history"]

    assert history == {"t": [100.0], "queued": [1], "running": [0], "busy": {"cpu": [0], "v100": [0]}}


def test_a_preemption_event_says_in_how_many_seconds_the_lease_ends_not_when_in_unix_time(tmp_path):
    now = [1_000_000.0]
    store = StateStore(tmp_path / "state.db")
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(thresholds_gpu_s=(30.0,)),
                          ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0, fill_gap_s=0.0),
                          clock=lambda: now[0])
    scheduler.submit(job("first", "ann"), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 0)  # its lease ends with the round, at +60 s
    scheduler.submit(job("second", "bob"), "bob")
    while store.job(1).stop is None and now[0] < 1_000_100.0:
        now[0] += 1.0
        scheduler.tick()

    events = TestClient(create_app(scheduler)).get("/dashboard/jobs/1").json()["events"]

    preempt = next(e for e in events if e["event"] == "preempt")
    assert preempt["detail"] == f"round 2, lease ends in {1_000_060.0 - preempt['time']:.0f} s"
    assert "1000060" not in preempt["detail"]
