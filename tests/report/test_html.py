"""report.html: one self-contained file, with the summary table, the charts' data and plotly.js
inside (report_browser tests draw it in a real Chromium)."""

import base64
import gzip
import json
import re

import numpy as np
import pytest

from apportion.core import JobTable, ThroughputTable
from apportion.core.cluster import parse_cluster_shorthand
from apportion.policies import make_policy
from apportion.report import html as report_html
from apportion.report.html import report_figures, report_page, write_report
from apportion.sim import SimConfig, simulate

SPEEDS = ThroughputTable(kinds=("a",), gpu_types=("v100", "k80"), scales=(1, 2),
                         steps_per_s=np.array([[[1.0, 2.0], [0.5, 1.0]]]))


def two_jobs(policy="max-min-fairness", record=True, job_ids=("a", "b")):
    """Two 1000-step jobs on a v100 and a k80 that swap types every 360 s round (worked out in
    tests/sim/test_holdings.py): a done at 1280 s, b at 1360 s."""
    jobs = JobTable.build(job_id=list(job_ids), submit_time_s=[0, 0], kind_names=["a", "a"], num_gpus=[1, 1],
                          total_steps=[1000, 1000], kinds=("a",))
    return simulate(jobs, parse_cluster_shorthand("v100:1,k80:1"), SPEEDS, make_policy(policy),
                    SimConfig(round_s=360, restart_cost_s=0), record_holdings=record)


def unpacked(page: str, element_id: str) -> str:
    packed = re.search(rf'<script type="application/octet-stream" id="{element_id}">([^<]*)</script>', page).group(1)
    return gzip.decompress(base64.b64decode(packed)).decode("utf-8")


def test_the_page_carries_plotly_and_its_data_and_fetches_nothing():
    page = report_page([two_jobs()])

    assert "Plotly" in unpacked(page, "plotly-js")  # plotly.js itself, once
    assert page.count('id="plotly-js"') == 1
    assert not re.search(r'(src|href)\s*=\s*"?(https?:)?//', page)  # no CDN, no remote anything
    document = json.loads(unpacked(page, "report-data"))
    assert set(document["figures"]) == {"cdf", "utilization", "queue"}
    assert [g["policy"] for g in document["gantt"]] == ["max-min-fairness"]


def test_the_summary_table_is_plain_html_with_the_best_of_several_marked():
    page = report_page([two_jobs("fifo"), two_jobs("max-min-fairness")])

    table = page[page.index('<table class="summary">'):page.index("</table>")]
    assert "<th>fifo</th><th>max-min-fairness</th>" in table
    assert "<tr><th>completed</th><td>2</td><td>2</td></tr>" in table  # a tie: neither marked
    assert 'class="best"' in table
    assert '<select id="gantt-policy">' in page


def test_the_gantt_chart_has_a_bar_per_holding_coloured_by_type_and_a_mark_per_move():
    result = two_jobs()

    gantt = report_figures([result])["gantt"][0]["figure"]

    hours = 1 / 3600
    v100, k80 = gantt["bars"]
    assert (v100["name"], k80["name"]) == ("v100", "k80")
    assert v100["color"] != k80["color"]
    assert v100["row"] == [0, 0, 1, 1]
    assert v100["start"] == pytest.approx([0.0, 720 * hours, 360 * hours, 1080 * hours], abs=1e-5)
    assert v100["end"] == pytest.approx([360 * hours, 1080 * hours, 720 * hours, 1360 * hours], abs=1e-5)
    assert len(k80["row"]) == 4
    preemptions, moves = gantt["marks"]
    assert preemptions["time"] == []
    assert sorted(moves["row"]) == [0, 0, 0, 1, 1, 1]
    assert gantt["layout"]["yaxis"]["ticktext"] == ["a", "b"]


def test_job_ids_are_escaped_wherever_the_page_shows_them():
    result = two_jobs(job_ids=("<img src=x onerror=alert(1)>", "b"))

    gantt = report_figures([result])["gantt"][0]["figure"]

    assert gantt["layout"]["yaxis"]["ticktext"][0] == "&lt;img src=x onerror=alert(1)&gt;"
    assert all("<img" not in text for text in gantt["bars"][0]["text"])


def test_a_large_run_shows_every_kth_job_and_says_so(monkeypatch):
    monkeypatch.setattr(report_html, "GANTT_MAX_JOBS", 1)
    result = two_jobs()

    document = report_figures([result])
    gantt = document["gantt"][0]

    assert set(gantt["figure"]["bars"][0]["row"]) == {0}  # only job a, shown as row 0
    assert "every 2th job (1 of 2)" in gantt["note"]


def test_a_replay_without_holdings_still_gets_a_report_without_its_gantt_chart(tmp_path):
    result = two_jobs(record=False)

    path = write_report([result], tmp_path / "report.html")

    document = json.loads(unpacked(path.read_text(), "report-data"))
    assert document["gantt"][0]["figure"] is None
    assert "no holdings were recorded" in document["gantt"][0]["note"]
    assert [t["name"] for t in document["figures"]["utilization"]["data"]] == ["all GPUs"]


def test_utilization_is_per_gpu_type_in_percent_of_its_gpus():
    utilization = report_figures([two_jobs()])["figures"]["utilization"]

    assert [t["name"] for t in utilization["data"]] == ["v100", "k80"]
    assert all(set(t["y"]) == {100.0} for t in utilization["data"])  # both types busy until the last decision
