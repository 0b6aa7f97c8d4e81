"""What Jupyter shows of a result: report.html inline, drawn in its own frame in a real headless
Chromium, with the network cut off (as tests/report/test_report_browser.py opens the file)."""

from __future__ import annotations

from conftest import new_page

import apportion


def test_a_result_shown_inline_draws_the_report_s_charts_in_its_frame(browser, tmp_path):
    comparison = apportion.compare(policies=["fifo", "las"], jobs=30, rate=20, cluster="v100:2,k80:2", workers=1)
    notebook_page = tmp_path / "notebook.html"
    notebook_page.write_text(f"<!doctype html><html><body><h1>a notebook</h1>{comparison._repr_html_()}</body></html>",
                             encoding="utf-8")
    page = new_page(browser)
    try:
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "about:"))
                   else route.abort())
        page.goto(notebook_page.as_uri())
        frame = page.frame_locator("iframe")
        frame.locator("body[data-drawn=true]").wait_for(state="attached", timeout=60_000)

        for chart in ("cdf", "utilization", "queue", "gantt"):
            assert frame.locator(f"#{chart} .main-svg").count() > 0, f"no {chart} chart"
        assert frame.locator("table.summary thead th").all_inner_texts() == ["metric", "fifo", "las"]
        assert page.locator("h1").inner_text() == "a notebook"  # the notebook's own page is left alone
        assert page.errors == []
    finally:
        page.context.close()
