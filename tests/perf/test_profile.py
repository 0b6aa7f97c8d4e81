"""`apportion profile`: the kernels of a model's step, timed on this machine's CPU, feed `plan --measured`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.perf.accelerators import get_accelerator
from apportion.perf.calibrate import fit_kernels
from apportion.perf.gemm import gemm_time
from apportion.perf.profile import kernels_of, within_budget
from apportion.perf.transformer import Gemm, TransformerModel, layer_gemms, logits_gemm

TINY = ["--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "256", "--vocab", "1024"]


def test_the_kernels_are_each_distinct_product_of_a_layer_and_the_output_layer():
    model = TransformerModel("tiny", layers=2, hidden=256, heads=4, seq=256, vocab=1024)

    plan = kernels_of(model)

    # six forward products of a layer and the output layer's, each with its two backward ones:
    # every shape timed once (a shape two products share, once)
    every = {(g.m, g.n, g.k, g.batch) for f in layer_gemms(model, 1, 1) + [logits_gemm(model, 1, 1)]
             for g in (f, *f.backward())}
    timed = [(g.m, g.n, g.k, g.batch) for _, g in plan.gemms]
    assert set(timed) == every and len(timed) == len(every)
    assert plan.gemms[0] == ("qkv", Gemm("qkv", 256, 768, 256))
    assert plan.streams == (("add", 256 * 256),)


def test_a_product_too_long_for_its_budget_is_timed_with_fewer_heads_then_fewer_rows():
    big = Gemm("scores", 2048, 2048, 64, batch=16)  # 2 · 16 · 2048² · 64 = 8.6 GFLOP

    assert within_budget(big, 1e12, 1.0) == big  # a second at 1 TFLOP/s holds it
    # 0.3 GFLOP: one head of 2048 rows is 0.54, so 1024 rows
    assert within_budget(big, 1e9, 0.3) == Gemm("scores", 1024, 2048, 64, batch=1)
    assert within_budget(big, 1e3, 1e-3).m == 16  # never fewer than 16 rows


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    result = CliRunner().invoke(app, ["profile", *TINY, "--device", "cpu", "--threads", "1", "--budget-s", "0.5",
                                      "--out", str(out)])
    return result, out


def test_profile_writes_the_kernel_times_of_this_cpu(profiled):
    result, out = profiled

    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["gpu_type"] == "cpu" and document["device"].startswith("cpu")
    assert all(k["seconds"] > 0 for k in document["kernels"])
    assert {k["kind"] for k in document["kernels"]} == {"gemm", "memory"}
    assert "GEMMs at" in result.stdout and "plan --measured" in result.stdout


def test_plan_fits_the_gemm_rate_to_the_profile(profiled):
    _, out = profiled
    kernels = json.loads(out.read_text())["kernels"]
    gemms = [k for k in kernels if k["kind"] == "gemm"]
    cpu = get_accelerator("cpu")
    modelled = sum(gemm_time(k["m"], k["n"], k["k"], cpu, "fp32", k["batch"]).seconds for k in gemms)
    measured = sum(k["seconds"] for k in gemms)

    result = CliRunner().invoke(app, ["plan", "--measured", str(out), *TINY, "--gpus", "2", "--global-batch", "4",
                                      "--top", "1", "--json"])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpu_type"] == "cpu"
    assert data["software_profile"]["gemm_efficiency"] == pytest.approx(modelled / measured)
    assert fit_kernels(kernels, "cpu").factor == pytest.approx(modelled / measured)


def test_bad_profile_options_are_one_line(tmp_path):
    runner = CliRunner()
    device = runner.invoke(app, ["profile", *TINY, "--device", "tpu", "--out", str(tmp_path / "p.json")])
    folder = runner.invoke(app, ["profile", *TINY, "--out", str(tmp_path / "no" / "p.json")])

    assert device.exit_code == 2 and "--device must be cpu or cuda" in device.output
    assert folder.exit_code == 2 and "does not exist" in folder.output
