"""report.html in a real headless Chromium, with the network cut off: it draws every chart from
what the file carries, without an error (one browser and one opening of the page for the module;
a screenshot per test)."""

import pytest
from conftest import new_page

from apportion.experiment import WorkloadSettings, load_inputs, run_policy
from apportion.report.html import write_report

POLICIES = ("fifo", "max-min-fairness")
GANTT_SEGMENTS = ("document.getElementById('gantt').data.filter(t => ['v100', 'p100', 'k80'].includes(t.name))"
                  ".reduce((n, t) => n + t.x.length / 3, 0)")


@pytest.fixture(scope="module")
def results():
    inputs = load_inputs(WorkloadSettings(jobs=40, rate_per_hour=20, cluster="v100:2,p100:2,k80:2"))
    return [run_policy(inputs, policy, record_holdings=True) for policy in POLICIES]


@pytest.fixture(scope="module")
def opened(browser, results, tmp_path_factory):
    """The comparison's report.html, opened with every request that is not for a file refused (no network)."""
    path = write_report(results, tmp_path_factory.mktemp("report") / "report.html")
    page = new_page(browser)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-drawn=true]", state="attached", timeout=60_000)
    yield page
    page.context.close()


def test_the_report_opens_offline_and_draws_every_chart_without_errors(opened, tmp_path):
    opened.screenshot(path=tmp_path / "report.png", full_page=True)

    assert opened.errors == []
    for chart in ("cdf", "utilization", "queue", "gantt"):
        assert opened.locator(f"#{chart} .main-svg").count() > 0, f"no {chart} chart"
    assert opened.evaluate("document.getElementById('cdf').data.map(t => t.name)") == list(POLICIES)
    assert opened.locator("table.summary thead th").all_inner_texts() == ["metric", *POLICIES]
    assert opened.locator("#status").is_hidden()


def test_the_gantt_chart_shows_the_policy_chosen(opened, results, tmp_path):
    segments = [len(r.holdings.job) for r in results]
    assert segments[0] != segments[1]

    opened.select_option("#gantt-policy", "0")
    opened.wait_for_function(f"{GANTT_SEGMENTS} === {segments[0]}")
    opened.select_option("#gantt-policy", "1")
    opened.wait_for_function(f"{GANTT_SEGMENTS} === {segments[1]}")
    opened.screenshot(path=tmp_path / "report-gantt.png", full_page=True)

    assert opened.errors == []
