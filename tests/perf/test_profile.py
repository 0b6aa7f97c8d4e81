"""`apportion profile`: the kernels of a model's step, timed on this machine's CPU (and its collectives
among two gloo processes standing for two devices), feed `plan --measured`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.perf.accelerators import get_accelerator
from apportion.core.errors import InputError
from apportion.perf.calibrate import fit_kernels, read_measurement
from apportion.perf.roofline import Gemm, gemm_time
from apportion.perf.parallel import Group, allreduce_time, alltoall_time
from apportion.perf.profile import collective_sizes, kernels_of, within_budget
from apportion.perf.transformer import TransformerModel, layer_gemms, logits_gemm

TINY = ["--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "256", "--vocab", "1024"]
TINY_MOE = [*TINY, "--experts", "2", "--top-k", "1"]


def test_the_kernels_are_each_distinct_product_of_a_layer_and_the_output_layer():
    model = TransformerModel("tiny", layers=2, hidden=256, heads=4, seq=256, vocab=1024)

    plan = kernels_of(model)

    # six forward products of a layer and the output layer's, each with its two backward ones:
    # every shape timed once (a shape two products share, once)
    every = {(g.m, g.n, g.k, g.batch) for f in layer_gemms(model, 1, 1) + [logits_gemm(model, 1, 1)]
             for g in (f, *f.backward())}
    timed = [(g.m, g.n, g.k, g.batch) for _, g in plan.gemms]
    assert set(timed) == every and len(timed) == len(every)
    assert plan.gemms[0] == ("qkv", Gemm(256, 768, 256, name="qkv"))
    assert plan.streams == (("add", 256 * 256),)


def test_a_product_too_long_for_its_budget_is_timed_with_fewer_heads_then_fewer_rows():
    big = Gemm(2048, 2048, 64, batch=16, name="scores")  # 2 · 16 · 2048² · 64 = 8.6 GFLOP

    assert within_budget(big, 1e12, 1.0) == big  # a second at 1 TFLOP/s holds it
    # 0.3 GFLOP: one head of 2048 rows is 0.54, so 1024 rows
    assert within_budget(big, 1e9, 0.3) == Gemm(1024, 2048, 64, batch=1, name="scores")
    assert within_budget(big, 1e3, 1e-3).m == 16  # never fewer than 16 rows


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    result = CliRunner().invoke(app, ["profile", *TINY_MOE, "--device", "cpu", "--threads", "1", "--budget-s", "0.5",
                                      "--processes", "2", "--out", str(out)])
    return result, out


def test_profile_writes_the_kernel_times_of_this_cpu(profiled):
    result, out = profiled

    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["gpu_type"] == "cpu" and document["device"].startswith("cpu")
    assert all(k["seconds"] > 0 for k in document["kernels"])
    assert {k["kind"] for k in document["kernels"]} == {"gemm", "memory", "allreduce", "alltoall"}
    assert "GEMMs at" in result.stdout and "plan --measured" in result.stdout


def test_profile_times_an_allreduce_and_an_all_to_all_among_two_processes(profiled):
    result, out = profiled
    model = TransformerModel("tiny", layers=2, hidden=256, heads=4, seq=256, vocab=1024, experts=2, top_k=1)
    collectives = [k for k in json.loads(out.read_text())["kernels"] if k["kind"] in ("allreduce", "alltoall")]

    # one layer's activation (256 × 256 fp32) and one layer's gradients (12 · 256² fp32), each both ways
    assert collective_sizes(model) == [("activation", 4 * 256 * 256), ("layer gradients", 4 * 12 * 256 * 256)]
    assert sorted((k["kind"], k["bytes"]) for k in collectives) == sorted(
        (kind, size) for kind in ("allreduce", "alltoall") for _, size in collective_sizes(model))
    assert all(k["ranks"] == 2 and k["backend"] == "gloo" and k["seconds"] > 0 for k in collectives)
    assert "collectives at" in result.stdout and "allreduce of 0.3 MB among 2" in result.stdout


def test_plan_takes_its_collective_bandwidth_from_the_profile(profiled):
    _, out = profiled
    kernels = json.loads(out.read_text())["kernels"]
    cpu = get_accelerator("cpu")
    modelled = sum((allreduce_time if k["kind"] == "allreduce" else alltoall_time)(k["bytes"], Group(2, 2), cpu)
                   for k in kernels if k["kind"] in ("allreduce", "alltoall"))
    measured = sum(k["seconds"] for k in kernels if k["kind"] in ("allreduce", "alltoall"))
    layout = ["--gpus", "2", "--global-batch", "4", "--tp", "2", "--pp", "1", "--micro-batch", "1", "--json"]

    fitted = CliRunner().invoke(app, ["plan", "--measured", str(out), *TINY, *layout])
    hardware = CliRunner().invoke(app, ["plan", "--gpu-type", "cpu", *TINY, *layout])

    assert fitted.exit_code == 0, fitted.output
    profile = json.loads(fitted.stdout)["software_profile"]
    assert profile["comm_efficiency"] == pytest.approx(modelled / measured)
    comm = json.loads(fitted.stdout)["time_breakdown_s"]["tensor_parallel_comm"]
    assert comm == pytest.approx(json.loads(hardware.stdout)["time_breakdown_s"]["tensor_parallel_comm"]
                                 * measured / modelled)


def test_collectives_fit_as_model_time_over_measured_time():
    gemm = {"kind": "gemm", "m": 4096, "n": 4096, "k": 4096, "seconds": 1e-3}
    reduce = {"kind": "allreduce", "bytes": 64e6, "ranks": 8, "seconds": 1.0}
    v100 = get_accelerator("v100")
    model = allreduce_time(64e6, Group(8, 8), v100)  # 2 · 7/8 · 64 MB at 0.67 × 150 GB/s, + 14 · 5 µs

    assert model == pytest.approx(2 * 7 / 8 * 64e6 / (200 / 300 * 150e9) + 14 * 5e-6)
    assert fit_kernels([gemm, {**reduce, "seconds": 2 * model}], v100).profile.comm_efficiency == pytest.approx(0.5)
    assert fit_kernels([gemm], v100).profile.comm_efficiency == 1.0  # nothing timed: the base profile's


def test_a_collective_entry_names_its_bad_field(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"gpu_type": "cpu", "kernels": [
        {"kind": "gemm", "m": 8, "n": 8, "k": 8, "seconds": 1e-6},
        {"kind": "allreduce", "bytes": 1024, "ranks": 1, "seconds": 1e-3}]}))

    with pytest.raises(InputError, match=r"kernels\[1\]\.ranks must be a whole number of at least 2, got 1"):
        read_measurement(path)


def test_plan_fits_the_gemm_rate_to_the_profile(profiled):
    _, out = profiled
    kernels = json.loads(out.read_text())["kernels"]
    gemms = [k for k in kernels if k["kind"] == "gemm"]
    cpu = get_accelerator("cpu")
    modelled = sum(gemm_time(Gemm(k["m"], k["n"], k["k"], k["batch"]), cpu, "fp32").seconds for k in gemms)
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
    processes = runner.invoke(app, ["profile", *TINY, "--processes", "0", "--out", str(tmp_path / "p.json")])
    assert processes.exit_code == 2 and "--processes must be positive" in processes.output
