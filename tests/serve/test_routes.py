"""Where a request goes (apportion/serve/http/routes.py): the table of routes is what the server serves
and what its API document describes, and each row's rule of who may call is what a caller meets."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.accounts.auth import add_user
from apportion.serve.base.slots import parse_slots
from apportion.serve.http import api_docs
from apportion.serve.http.api import create_app
from apportion.serve.http.callers import ANYONE
from apportion.serve.http.routes import ROUTES
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server with credentials: alice (a user) and ops (an admin), and one job of alice's."""
    tmp_path = tmp_path_factory.mktemp("routes")
    store = StateStore(tmp_path / "state.db")
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(),
                          ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0))
    client = TestClient(create_app(scheduler))
    credentials = {name: add_user(store, name, admin=name == "ops", now=0.0) for name in ("alice", "ops")}
    client.post("/jobs", json=JOB, headers={"Authorization": f"Bearer {credentials['alice']}"})
    return client, credentials


def test_the_server_serves_the_rows_of_the_table_and_nothing_else(server):
    client, _ = server
    served = {(method.lower(), route.path) for route in client.app.routes for method in route.methods
              if route.path != "/openapi.json" and method != "HEAD"}
    assert served == {(route.method, route.path) for route in ROUTES}


def test_the_api_document_describes_each_row_it_shows(server):
    client, _ = server
    shown = {(route.method, route.path) for route in ROUTES if route.options.get("include_in_schema", True)}
    assert shown == set(api_docs.ROUTES)
    document = client.get("/openapi.json").json()["paths"]
    assert {(method, path) for path, methods in document.items() for method in methods} == shown


def _call(client, route, headers=None):
    asset = "api_docs.js" if route.path.startswith("/docs") else "dashboard.js"
    path = route.path.replace("{job_id}", "1").replace("{name}", asset)
    return client.request(route.method.upper(), path, headers=headers or {},
                          json={} if route.method == "post" else None)


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: f"{route.method} {route.path}")
def test_a_caller_without_a_credential_from_another_machine_gets_only_what_anyone_may(server, route):
    client, _ = server
    answer = _call(client, route)  # the test client is not on loopback
    if route.who is ANYONE:
        assert answer.status_code == 200, answer.text
    else:
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == "Bearer"


def test_adding_privacy_blocks_is_for_admins_as_its_row_says(server):
    client, credentials = server
    body = {"blocks": [{"name": "mon", "epsilon": 1.0, "delta": 1e-6}]}
    refused = client.post("/blocks", json=body, headers={"Authorization": f"Bearer {credentials['alice']}"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "adding privacy blocks is for admins; you are 'alice'"
    added = client.post("/blocks", json=body, headers={"Authorization": f"Bearer {credentials['ops']}"})
    assert added.status_code == 200 and added.json() == {"added": ["mon"]}


def test_an_admins_route_reads_the_request_before_it_refuses_a_user(server):
    client, credentials = server
    answer = client.post("/blocks", content=b"{", headers={"Authorization": f"Bearer {credentials['alice']}",
                                                            "Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["detail"].endswith("the body is not valid JSON")


def test_a_row_whose_handler_needs_a_caller_its_rule_does_not_find_is_refused_when_the_app_is_built(server):
    from fastapi import FastAPI

    from apportion.serve.http import handlers
    from apportion.serve.http.routes import Route, add_routes

    client, _ = server
    with pytest.raises(ValueError, match="takes who, but anyone may call it"):
        add_routes(FastAPI(), client.app.state.served, (Route("get", "/status", handlers.status, ANYONE),))
