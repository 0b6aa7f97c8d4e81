"""Every benchmark runs end to end in its quick mode (``--quick``: a few jobs, seconds), so a change
that breaks a benchmark fails here rather than the next time someone measures.

Each script runs in this process (``runpy``, as ``python benchmarks/KIND/NAME.py --quick`` would),
in a temporary directory; it must finish without an error and print its figures. The figures of a
quick run mean nothing; benchmarks/README.md says what each full run prints and its target.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# Each script under benchmarks/: the arguments of its quick run.
QUICK = {
    "compare/cloud_market.py": ["--quick"],
    "compare/data_stalls.py": ["--quick"],
    "compare/data_stalls_local.py": ["--quick"],
    "compare/gavel_comparison.py": ["--quick"],
    "compare/gavel_reset_rule.py": ["--quick"],
    "compare/goodput.py": ["--quick"],
    "compare/privacy.py": ["--quick"],
    "compare/received_share_philly.py": ["--quick"],
    "faults/abuse.py": ["--quick"],
    "accuracy/durations.py": ["--quick"],
    "accuracy/durations_library.py": ["--quick"],
    "accuracy/pair_model.py": ["--quick"],
    "accuracy/perf_calibration.py": ["--quick"],
    "accuracy/perf_kinds.py": ["--quick"],
    "accuracy/perf_kinds_variants.py": ["--quick"],
    "accuracy/perf_validation.py": ["--quick"],
    "checks/check_durations_identical.py": ["--quick"],
    "checks/check_finish_time_warm.py": ["--quick"],
    "checks/check_identical.py": ["--quick"],
    "checks/check_max_min_warm.py": ["--quick"],
    "checks/code_shape.py": ["--quick"],
    "speed/checkpoint_digest.py": ["--quick"],
    "speed/cli_startup.py": ["--quick"],
    "speed/market_read.py": ["--quick"],
    "speed/metrics_scrape.py": ["--quick"],
    "speed/node_placement.py": ["--quick"],
    "speed/preemption_roundtrip.py": ["--quick"],
    "speed/profile_simulate.py": ["--quick"],
    "speed/provisioner_round.py": ["--quick"],
    "speed/ray_executor.py": ["--quick"],
    "speed/report_html.py": ["--quick"],
    "speed/serve_overhead.py": ["--quick"],
    "speed/serve_scale.py": ["--quick"],
    "speed/simulate_speed.py": ["--quick"],
    "speed/slurm_roundtrip.py": ["--quick"],
    "speed/solve.py": ["--quick"],
    "speed/trace_info.py": ["--quick"],
    "speed/warm_start.py": ["--quick"],
    "speed/workloads_speed.py": ["--quick"],
}

# The original systems' own side of a comparison: they run only inside its checkout, under its Python (not
# given here); their arguments still parse.
ORIGINALS = ("compare/helios_philly.py", "compare/privatekube_driver.py", "compare/synergy_original.py")

# What runs the scripts that have no quick run of their own above.
RUN_BY_OTHERS = {
    "accuracy/fidelity.py": "test_fidelity_quick_mode_serves_and_replays, below",
    "accuracy/fidelity_attempts.py": "test_fidelity_attempts_reads_a_kept_run, below",
    "faults/abuse_server.py": "every abuse case's server (faults/abuse.py --quick)",
    "faults/chaos.py": "tests/serve/test_chaos.py (chaos.py --quick: 4 jobs, 4 kills, no clean pass, nothing lost)",
    "faults/chaos_accounting.py": "chaos.py, which accounts every chaos pass with it",
    "jobs/loader_job.py": "compare/data_stalls_local.py --quick",
    "jobs/timed_job.py": "speed/warm_start.py, speed/preemption_roundtrip.py and accuracy/fidelity.py --quick",
}

# Scripts that run as a process of their own: those that start a fresh Python with multiprocessing's
# "spawn" (their figures' own process), which needs their own ``__main__``, and check_max_min_warm.py,
# which wraps the max-min model's solve for the rest of its process.
OWN_PROCESS = {"speed/report_html.py", "speed/simulate_speed.py", "checks/check_max_min_warm.py"}


def run_script(script: str, arguments: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run one benchmark as its own ``__main__``; an exit other than 0 fails."""
    monkeypatch.chdir(tmp_path)
    if script in OWN_PROCESS:
        done = subprocess.run([sys.executable, str(BENCHMARKS / script), *arguments], text=True,
                              stdout=subprocess.PIPE)
        print(done.stdout)
        assert done.returncode == 0, f"{script} exited with {done.returncode}"
        return
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / script), *arguments])
    monkeypatch.setattr(sys, "path", [str((BENCHMARKS / script).parent), *sys.path])
    try:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    except SystemExit as end:
        assert end.code in (0, None), f"{script} exited with {end.code!r}"


@pytest.mark.parametrize("script", sorted(QUICK))
def test_quick_mode_runs_and_prints(script: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_script(script, QUICK[script], monkeypatch, tmp_path)
    assert capsys.readouterr().out.strip(), f"{script} printed nothing"


@pytest.mark.parametrize("script", ORIGINALS)
def test_original_systems_drivers_parse_their_arguments(script: str, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_script(script, ["--help"], monkeypatch, tmp_path)
    assert "usage:" in capsys.readouterr().out


def test_every_benchmark_is_run_by_the_suite() -> None:
    """A new script under benchmarks/ needs a quick run here (or a named test that runs it)."""
    scripts = {str(path.relative_to(BENCHMARKS)) for pattern in ("*.py", "*/*.py") for path in BENCHMARKS.glob(pattern)
               if path.name != "__init__.py"}  # a script at the top, outside the folders by kind, counts too
    covered = set(QUICK) | set(ORIGINALS) | set(RUN_BY_OTHERS)
    assert scripts - covered == set(), "benchmarks without a quick run in the suite"
    assert covered - scripts == set(), "quick runs of benchmarks that are gone"


@pytest.mark.parametrize("script", sorted(QUICK))
def test_quick_mode_is_documented(script: str) -> None:
    """Each quick run above is the script's own ``--quick`` and benchmarks/README.md lists the script."""
    assert '"--quick"' in (BENCHMARKS / script).read_text()
    assert f"`{Path(script).name}`" in (BENCHMARKS / "README.md").read_text()


@pytest.fixture(scope="module")
def fidelity_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A quick fidelity run (benchmarks/accuracy/fidelity.py --quick --keep): its kept state directories
    and the lines it printed."""
    kept = tmp_path_factory.mktemp("fidelity")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(kept)
        monkeypatch.setattr(sys, "path", list(sys.path))
        script = runpy.run_path(str(BENCHMARKS / "accuracy" / "fidelity.py"), run_name="fidelity")
        lines = script["main"](["--quick", "--keep", str(kept)])
    return kept, lines


def test_fidelity_quick_mode_serves_and_replays(fidelity_run: tuple[Path, list[dict]]) -> None:
    """The run was served, replayed, and served again on a fake clock from the state store's typed records."""
    kept, lines = fidelity_run
    assert [(line["policy"], line["jobs"]) for line in lines] == [("las", 3)]
    assert set(lines[0]["control"]) == {"avg_jct_error", "p90_job_error"}
    assert (kept / "las" / "state.db").is_file()


def test_fidelity_attempts_reads_a_kept_run(fidelity_run: tuple[Path, list[dict]], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept, _ = fidelity_run
    run_script("accuracy/fidelity_attempts.py", ["--quick", str(kept / "las")], monkeypatch, tmp_path)
    assert '"policy": "las"' in capsys.readouterr().out
