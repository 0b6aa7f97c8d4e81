"""/openapi.json describes the API (the job fields a submit takes, the bearer credential, the
errors it answers) and /docs shows it under a Content-Security-Policy that runs no inline script."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http import api_docs
from apportion.serve.http.api import create_app
from apportion.serve.jobs.jobspec import FIELDS
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


@pytest.fixture()
def client(tmp_path):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(), config)
    return TestClient(create_app(scheduler, token="admin-token-" + "x" * 32))


def resolve(document: dict, schema: dict) -> dict:
    name = schema["$ref"].rsplit("/", 1)[1]
    return document["components"]["schemas"][name]


def test_the_submit_route_documents_every_job_field(client):
    document = client.get("/openapi.json").json()
    submit = document["paths"]["/jobs"]["post"]
    body = resolve(document, submit["requestBody"]["content"]["application/json"]["schema"])

    assert submit["summary"] == "Submit a job"
    assert [(p["name"], p["in"]) for p in submit["parameters"]] == [("Idempotency-Key", "header")]
    assert set(body["properties"]) == set(FIELDS)
    assert body["properties"]["gpus"]["maximum"] == 2**20 and body["properties"]["priority"]["maximum"] == 1000
    assert all(prop.get("description") for prop in body["properties"].values())
    refused = resolve(document, submit["responses"]["400"]["content"]["application/json"]["schema"])
    assert {"detail", "field", "message"} <= set(refused["properties"])


def test_every_route_has_a_summary_and_the_bearer_scheme_stands_for_its_header(client):
    document = client.get("/openapi.json").json()
    operations = [(path, method, op) for path, methods in document["paths"].items() for method, op in methods.items()]

    assert {(path, method) for path, method, _ in operations} >= set((p, m) for m, p in api_docs.ROUTES)
    assert [f"{m} {p}" for p, m, op in operations if not op.get("summary")] == []
    bearer = document["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer") and document["security"] == [{"bearer": []}, {}]
    assert [p for _, _, op in operations for p in op.get("parameters", ()) if p["name"] == "authorization"] == []
    assert [f"{m} {p}" for p, m, op in operations if "422" in op["responses"]] == []  # a bad request is a 400


def test_a_bad_body_is_still_refused_by_hand_naming_the_field(client):
    answer = client.post("/jobs", json={"name": "x", "command": "x", "total_steps": 10, "gpus": "two", "user": "ann"},
                         headers={"Authorization": "Bearer admin-token-" + "x" * 32})
    assert answer.status_code == 400 and answer.json()["field"] == "gpus"


def test_the_docs_page_runs_only_scripts_it_can_name(client):
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    policy = page.headers["content-security-policy"]
    script_src = re.search(r"script-src ([^;]*)", policy).group(1).split()
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    assert "<script>" not in page.text  # no inline script: every one has a src
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert "docs/assets/api_docs.js" in scripts and len(scripts) == 2
    for src in scripts:
        if src.startswith("https://"):  # without fastapi-offline: the CDN, which the policy names
            assert src.startswith(api_docs.CDN) and api_docs.CDN in script_src
        else:
            served = client.get(f"/{src}")
            assert served.status_code == 200 and served.headers["content-type"].startswith("text/javascript")
    assert client.get("/docs/assets/nothing.js").status_code == 404


def test_without_the_offline_package_the_page_loads_swagger_ui_from_the_cdn(client, monkeypatch):
    monkeypatch.setattr(api_docs, "swagger_ui_dir", lambda: None)
    page = client.get("/docs")
    assert f'<script src="{api_docs.CDN_ASSETS["swagger-ui-bundle.js"]}"></script>' in page.text
    assert f"script-src 'self' {api_docs.CDN};" in page.headers["content-security-policy"]


def test_with_the_offline_package_the_page_needs_no_network(client, monkeypatch, tmp_path):
    for name in api_docs.CDN_ASSETS:
        (tmp_path / name).write_text(f"/* {name} */")
    monkeypatch.setattr(api_docs, "swagger_ui_dir", lambda: tmp_path)
    api_docs._asset.cache_clear()
    try:
        page = client.get("/docs")
        assert "https://" not in page.text and "https://" not in page.headers["content-security-policy"]
        assert client.get("/docs/assets/swagger-ui.css").text == "/* swagger-ui.css */"
    finally:
        api_docs._asset.cache_clear()


def test_a_method_a_path_does_not_serve_is_a_405_naming_every_method_it_does(client):
    document = client.get("/openapi.json").json()
    for path, methods in document["paths"].items():
        concrete = path.replace("{job_id}", "1")
        answer = client.request("OPTIONS", concrete)
        assert answer.status_code == 405, path
        assert answer.headers["allow"] == ", ".join(m.upper() for m in ("get", "post") if m in methods), path
        assert "detail" in answer.json()
    assert client.delete("/jobs").headers["allow"] == "GET, POST"  # not only the first route's method


def test_metrics_are_documented_as_the_prometheus_text_they_are(client):
    document = client.get("/openapi.json").json()
    documented = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    served = client.get("/metrics", headers={"Authorization": "Bearer admin-token-" + "x" * 32})

    assert list(documented) == ["text/plain"]
    assert served.status_code == 200 and served.headers["content-type"].startswith("text/plain")


def test_every_route_declares_what_it_can_answer(client):
    document = client.get("/openapi.json").json()
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            declared = set(operation["responses"])
            assert {"200", "400", "401", "403", "413", "429"} <= declared, f"{method} {path}"
            if method == "post":  # it stores: a conflict or a quota (409), a full disk (507)
                assert {"409", "507"} <= declared, f"{method} {path}"
            if "{job_id}" in path:
                assert "404" in declared, f"{method} {path}"
            assert operation["responses"]["429"]["headers"]["Retry-After"]
    submit_refused = document["paths"]["/jobs"]["post"]["responses"]["400"]["description"]
    assert "perf catalog" in submit_refused and "after" in submit_refused  # what only the server can judge


def test_a_name_fits_the_document_exactly_when_the_server_takes_it(client):
    """(The server strips spaces, separators included, off a name's ends first: these are inside.)"""
    document = client.get("/openapi.json").json()
    pattern = re.compile(resolve(document, {"$ref": "#/components/schemas/JobSpec"})["properties"]["queue"]["pattern"])
    for name in ("gpu-team", "équipe", "チーム", "a b", "", "tab\there", "new\nline", "zero\u200bwidth",
                 "line\u2028sep", "bom\ufeffx", "tag\U000e0041x", "bell\x07x", "del\x7fx", "c1\x85x"):
        taken = client.post("/jobs", json={"name": "x", "command": "x", "total_steps": 1, "queue": name},
                            headers={"Authorization": "Bearer admin-token-" + "x" * 32})
        assert (pattern.search(name) is not None) == (taken.status_code == 200), repr(name)


def test_a_body_one_past_the_documents_bound_is_refused_and_one_at_it_is_not(client):
    document = client.get("/openapi.json").json()
    most = resolve(document, {"$ref": "#/components/schemas/Lease"})["properties"]["skipped_checkpoints"]["maxItems"]
    admin = {"Authorization": "Bearer admin-token-" + "x" * 32}

    def lease(lines):
        return client.post("/jobs/1/lease", json={"attempt": 1, "skipped_checkpoints": ["step-1.pt: torn"] * lines},
                           headers=admin)

    over = lease(most + 1)
    assert over.status_code == 400 and over.json()["field"] == "skipped_checkpoints"
    assert lease(most).status_code == 404  # past the body's checks: there is no job 1


def test_the_header_that_pages_the_job_list_is_documented(client):
    document = client.get("/openapi.json").json()
    headers = document["paths"]["/jobs"]["get"]["responses"]["200"]["headers"]
    assert list(headers) == ["X-Next-After-Id"]


def test_a_digit_that_is_not_ascii_is_no_job_id_whatever_isdigit_says(client):
    """"²".isdigit() is True and int("²") fails: such an id is a 404 (path) or a 400 (after), never a 500."""
    admin = {"Authorization": "Bearer admin-token-" + "x" * 32}
    assert client.get("/dashboard/jobs/²", headers=admin).status_code == 404
    waits = client.post("/jobs", json={"name": "x", "command": "x", "total_steps": 1, "after": ["²"]}, headers=admin)
    assert waits.status_code == 400 and waits.json()["field"] == "after[0]"
