"""apportion.simulate, compare and sweep from Python: the commands' arguments and figures, DataFrames,
the command's errors naming the argument by its keyword, and a light ``import apportion``."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import apportion
from apportion.cli import app
from apportion.report.outputs import JOB_COLUMNS, TIMELINE_COLUMNS

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def figures(summary: dict) -> dict:
    """A summary without its wall-clock time."""
    return {k: v for k, v in summary.items() if k != "sim_wall_s"}


def cli_json(*args: str) -> dict:
    done = runner.invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def run():
    return apportion.simulate(policy="las", jobs=30, rate=6)


@pytest.fixture(scope="module")
def comparison():
    return apportion.compare(policies=["fifo", "max-min-fairness"], jobs=30, workers=1)


def test_simulate_gives_the_figures_of_the_command_on_the_same_arguments(run):
    assert figures(run.result.summary) == figures(cli_json("simulate", "-p", "las", "--jobs", "30", "--rate", "6"))
    assert run.summary.loc[0, "avg_jct_s"] == run.result.summary["avg_jct_s"]


def test_a_policy_option_is_a_keyword_as_it_is_a_flag_on_the_command_line():
    run = apportion.simulate(policy="max-min-fairness", jobs=20, agnostic=True)

    assert run.policy == "max-min-fairness:agnostic"
    assert figures(run.result.summary) == figures(cli_json("simulate", "--jobs", "20", "--agnostic"))


def test_compare_gives_the_figures_of_the_command_a_row_a_policy(comparison):
    shown = cli_json("compare", "--policies", "fifo,max-min-fairness", "--jobs", "30", "--workers", "1")

    assert [figures(r.summary) for r in comparison.results] == [figures(s) for s in shown["policies"]]
    assert list(comparison.summary.index) == ["fifo", "max-min-fairness"]
    assert comparison["fifo"].result is comparison.results[0]


def test_sweep_gives_the_cells_and_means_of_the_command():
    result = apportion.sweep(policies="fifo", rates=[4, 8], seeds=range(2), jobs=15, workers=1)
    shown = cli_json("sweep", "--policies", "fifo", "--rates", "4,8", "--seeds", "0-1", "--jobs", "15",
                     "--workers", "1")

    def without_time(rows):
        return [{k: v for k, v in row.items() if k != "sim_wall_s"} for row in rows]

    assert without_time(result.rows) == without_time(shown["cells"])
    assert result.means == shown["summary"]
    assert result.grid == shown["grid"]
    assert list(result.summary["rate_per_hour"]) == [4.0, 8.0]
    assert result.summary.loc[0, "avg_jct_s"] == shown["summary"][0]["avg_jct_s"]["mean"]
    assert result.summary.loc[0, "avg_jct_s_ci95"] == shown["summary"][0]["avg_jct_s"]["ci95"]
    assert len(result.cells) == 4


def test_jobs_and_timeline_are_the_columns_of_the_csv_files_as_numbers(run, tmp_path):
    pandas = pytest.importorskip("pandas")
    jobs, timeline = run.jobs, run.timeline

    assert tuple(jobs.columns) == JOB_COLUMNS and len(jobs) == 30
    assert tuple(timeline.columns) == TIMELINE_COLUMNS
    assert jobs["num_gpus"].dtype.kind == "i" and jobs["jct_s"].dtype.kind == "f"
    run.write(tmp_path)
    written = pandas.read_csv(tmp_path / "jobs.csv", keep_default_na=False)
    assert list(written["job_id"]) == list(jobs["job_id"]) and list(written["status"]) == list(jobs["status"])
    assert (written["jct_s"] - jobs["jct_s"].round(3)).abs().max() < 1e-9
    assert list(pandas.read_csv(tmp_path / "timeline.csv")["busy_gpus"]) == list(timeline["busy_gpus"])


def test_a_comparison_stacks_every_policy_s_jobs_and_timeline(comparison):
    jobs = comparison.jobs

    assert tuple(jobs.columns) == ("policy", *JOB_COLUMNS)
    assert list(jobs["policy"].unique()) == ["fifo", "max-min-fairness"] and len(jobs) == 60
    assert tuple(comparison.timeline.columns) == ("policy", *TIMELINE_COLUMNS)


def test_out_writes_what_the_command_writes(tmp_path):
    apportion.simulate(jobs=10, out=tmp_path / "run")

    assert {p.name for p in (tmp_path / "run").iterdir()} == {
        "summary.json", "jobs.csv", "timeline.csv", "report.png", "report.html"}


def test_jupyter_shows_the_interactive_report_inline(run, comparison):
    page = run._repr_html_()

    assert page.startswith("<iframe srcdoc=") and "plotly" in page and "&lt;html" in page
    assert "max-min-fairness" in comparison._repr_html_()


def test_jupyter_shows_a_sweep_as_its_table_and_plot():
    shown = apportion.sweep(policies="fifo", rates=4, seeds="0", jobs=10, workers=1)._repr_html_()

    assert "<table>" in shown and "<td>fifo</td>" in shown
    assert 'src="data:image/png;base64,' in shown


@pytest.mark.parametrize("arguments, message", [
    (dict(rate=0), "rate must be positive, got 0"),
    (dict(jobs=-1), "jobs must be positive, got -1"),
    (dict(policy="nope"), "unknown policy 'nope'"),
    (dict(cpu_split="fast"), "cpu_split must be one of"),
    (dict(privacy_n=3), "privacy_n applies with blocks only"),
    (dict(user_weights="a=1"), "user_weights needs share_by_user"),
    (dict(cluster="zz:4"), "GPU type 'zz' has no throughputs"),
    (dict(bogus=1), "unknown policy option 'bogus'"),
])
def test_a_bad_argument_is_the_command_s_error_naming_the_keyword(arguments, message):
    with pytest.raises(apportion.ArgumentError, match=message.replace("(", r"\(")):
        apportion.simulate(**arguments)


def test_the_command_line_names_the_same_errors_by_their_flags():
    done = runner.invoke(app, ["simulate", "--rate", "0"])

    assert done.exit_code == 2 and "--rate must be positive, got 0" in done.output


def test_sweep_and_compare_refuse_as_their_commands_do(tmp_path):
    with pytest.raises(apportion.ArgumentError, match="rates applies to the synthetic workload only"):
        apportion.sweep(workload="trace.csv", rates=[4])
    with pytest.raises(apportion.ArgumentError, match=r"seeds: '4-1' is an empty range"):
        apportion.sweep(seeds="4-1")
    with pytest.raises(apportion.ArgumentError, match="policies is empty"):
        apportion.compare(policies=[])
    (tmp_path / "file").write_text("")
    with pytest.raises(apportion.ArgumentError, match="out: .* exists and is not a directory"):
        apportion.compare(out=tmp_path / "file")


@pytest.mark.parametrize("name", ["simulate", "compare", "sweep"])
def test_each_function_takes_its_command_s_arguments_with_the_same_defaults(name):
    from apportion.cli import simulate as simulate_commands, sweep as sweep_command

    command = {"simulate": simulate_commands.simulate, "compare": simulate_commands.compare,
               "sweep": sweep_command.sweep}[name]
    flags = {p.name: p.default.default for p in inspect.signature(command).parameters.values()
             if p.name not in ("ctx", "as_json")}
    function = {p.name: p.default for p in inspect.signature(getattr(apportion, name)).parameters.values()
                if p.kind is not p.VAR_KEYWORD}

    assert function == flags


def test_dataframes_without_pandas_name_the_extra_that_brings_it(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)

    with pytest.raises(ImportError, match=r"pip install 'apportion\[notebook\]'"):
        run.jobs
    assert run.result.summary["jobs"] == 30  # everything else works without it


def test_importing_apportion_loads_none_of_the_api_and_compare_stays_the_function():
    code = ("import sys, apportion; light = not any(m in sys.modules for m in ('numpy', 'pandas', 'apportion.api'));"
            "import apportion.compare, apportion.sweep; print(light, callable(apportion.compare),"
            " apportion.sweep.__module__, sys.modules['apportion.compare'].run_policies.__name__)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)

    assert done.stdout.split() == ["True", "True", "apportion.api", "run_policies"]


def test_the_readme_s_python_example_prints_what_the_readme_shows():
    import doctest
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(>>> import apportion\n.*?)```", readme, re.S).group(1)
    test = doctest.DocTestParser().get_doctest(block, {}, "README.md", "README.md", 0)
    assert len(test.examples) >= 4
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    report = []
    runner.run(test, out=report.append)

    assert runner.failures == 0, "".join(report)


def test_a_plugin_policy_file_and_its_option_run_as_on_the_command_line():
    spec = f"{REPO / 'examples' / 'policies' / 'throughput_floor.py'}:ThroughputFloor"
    run = apportion.simulate(policy=spec, jobs=15, floor=0.25)

    assert figures(run.result.summary) == figures(cli_json("simulate", "-p", spec, "--jobs", "15", "--floor", "0.25"))
    with pytest.raises(apportion.ArgumentError, match="no_such.py"):
        apportion.simulate(policy="no_such.py:Policy", jobs=5)


def test_trace_format_reads_a_public_trace_from_python_as_on_the_command_line(tmp_path):
    from tests.workloads.test_public_traces import HELIOS

    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    assert apportion.simulate(workload=path, policy="fifo").result.summary["completed"] == 3  # told by its content
    assert apportion.simulate(workload=path, policy="fifo", trace_format="helios").result.summary["completed"] == 3
    with pytest.raises(apportion.ArgumentError, match="missing required column of an openb_pod_list file"):
        apportion.simulate(workload=path, trace_format="alibaba-2023")
    with pytest.raises(apportion.ArgumentError, match="^trace_format applies with workload FILE only$"):
        apportion.simulate(trace_format="helios")
    with pytest.raises(apportion.ArgumentError, match="^trace_format: unknown trace format 'slurm'"):
        apportion.sweep(workload=path, trace_format="slurm")
    result = CliRunner().invoke(app, ["compare", "--workload", str(path), "--trace-format", "slurm"])
    assert result.exit_code == 2 and "--trace-format: unknown trace format 'slurm'" in result.output
