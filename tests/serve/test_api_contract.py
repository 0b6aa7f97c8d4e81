"""Schemathesis, a fuzzer from outside the project, holds a live server to its own OpenAPI document:
for each route a bounded, seeded run of requests built from the document (bodies and parameters
that fit it, and ones that do not) must get no 5xx and only answers the document declares (status,
content type, headers, body), and the server must refuse only what the document refuses. It runs
with a user's credential, as a client would, and on a job that exists as well as on ids that do not."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", minversion="4.0")  # the test extra installs it

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis import GenerationMode, checks  # noqa: E402

from apportion.serve.http.api_docs import ROUTES  # noqa: E402
from live_server import LiveServer  # noqa: E402

EXAMPLES = 20  # a route's requests of each kind: the whole test stays well under a minute
FEWER = {("post", "/jobs"): 10}  # a job's schema is the largest to generate from (seconds for ten)
# what every answer is held to
CONFORMS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
            checks.response_headers_conformance, checks.response_schema_conformance]
# routes whose body or parameters the server judges on what only it knows (a model its catalog knows, a job
# that exists, fields judged together), as their 400 says: a request valid by the document may be refused
JUDGED_BY_THE_SERVER = {("post", "/jobs"), ("post", "/jobs/{job_id}/progress"), ("get", "/history"),
                        ("post", "/blocks")}
# routes whose document is stricter than the server (a submit takes a number where a name is asked, a
# name with spaces around it): a request the document refuses may still be served
LENIENT = {("post", "/jobs"), ("post", "/blocks")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = LiveServer(tmp_path_factory.mktemp("contract"), users=("ann",)).start()
    live.job = live.submit("existing", "ann")  # a job that exists, so routes on an id get past 404
    yield live
    live.stop()


@pytest.fixture(scope="module")
def schema(server):
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


@pytest.mark.parametrize("method, path", sorted(ROUTES, key=lambda route: (route[1], route[0])),
                         ids=lambda value: value)
def test_the_server_answers_as_its_document_says(server, schema, method, path):
    operation = schema[path][method.upper()]
    documented = schema.raw_schema["paths"][path][method]
    credential = {"Authorization": f"Bearer {server.credential['ann']}"}
    known = {"job_id": str(server.job)} if "{job_id}" in path else {}

    def cases(mode):
        made = operation.as_strategy(mode)
        return st.one_of(made, operation.as_strategy(mode, path_parameters=known)) if known else made

    def fuzz(mode, check):
        @settings(max_examples=FEWER.get((method, path), EXAMPLES), derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(cases(mode))
        def run(case):
            case.call_and_validate(headers=credential, checks=CONFORMS + check, timeout=10)

        run()

    fuzz(GenerationMode.POSITIVE, [] if (method, path) in JUDGED_BY_THE_SERVER else [checks.positive_data_acceptance])
    if "requestBody" in documented or any(p["in"] != "path" for p in documented.get("parameters", ())):
        # something to get wrong (a job id is any text: one that is none is a 404)
        fuzz(GenerationMode.NEGATIVE, [] if (method, path) in LENIENT else [checks.negative_data_rejection])
    # a method the path does not serve: 405, its Allow header naming every method the document lists there
    unserved = operation.Case(method="OPTIONS", path_parameters=known or None)
    answer = unserved.call(headers=credential, timeout=10)
    assert answer.status_code == 405
    unserved.validate_response(answer, checks=[checks.not_a_server_error, checks.allow_header_conformance])
