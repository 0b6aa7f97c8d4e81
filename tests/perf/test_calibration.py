"""Software profiles and calibration from one measured step: fit, presets, the file, the command."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.core.errors import InputError
from apportion.perf import Layout, TransformerModel, get_preset, predict
from apportion.perf.calibrate import fit_step_time, read_measurement
from apportion.perf.memory import layer_activation_bytes
from apportion.perf.software import DEEPSPEED_PIPELINE, FSDP, MEGATRON_LM, SoftwareProfile, get_framework

MODEL = get_preset("gpt3-1.3b")
LAYOUT = Layout(tp=1, pp=1, dp=8, micro_batch=4, global_batch=64, recompute="selective", zero=1, schedule="none")


def test_half_the_rate_doubles_the_compute():
    one = predict(MODEL, LAYOUT, "a100-40gb")
    half = predict(MODEL, LAYOUT, "a100-40gb", MEGATRON_LM.scaled(0.5))

    assert half.breakdown_s["compute"] == pytest.approx(2 * one.breakdown_s["compute"])
    assert half.breakdown_s["optimizer"] == pytest.approx(2 * one.breakdown_s["optimizer"])
    assert half.breakdown_s["data_parallel_comm"] == one.breakdown_s["data_parallel_comm"]  # the wire is no slower


def test_a_fitted_profile_predicts_the_measurement_and_moves_other_layouts():
    measured = 1.5 * predict(MODEL, LAYOUT, "a100-40gb").step_time_s
    fitted = fit_step_time(MODEL, LAYOUT, "a100-40gb", measured, measured_memory_gb=30.0)
    bigger = replace(LAYOUT, dp=16, global_batch=128)

    again = predict(MODEL, LAYOUT, "a100-40gb", fitted.profile)
    assert again.step_time_s == pytest.approx(measured, rel=1e-6)
    assert again.memory.total == pytest.approx(30e9)
    assert 0.5 < fitted.factor < 0.7  # 1.5 × slower, a little of it communication the factor does not scale
    assert predict(MODEL, bigger, "a100-40gb", fitted.profile).step_time_s > predict(MODEL, bigger,
                                                                                       "a100-40gb").step_time_s


def test_the_models_own_prediction_fits_with_a_factor_of_one():
    own = predict(MODEL, LAYOUT, "a100-40gb").step_time_s

    assert fit_step_time(MODEL, LAYOUT, "a100-40gb", own).factor == pytest.approx(1.0, rel=1e-6)


def test_a_measurement_the_model_cannot_reach_is_refused():
    with pytest.raises(ValueError, match="outside what the model can fit"):
        fit_step_time(MODEL, LAYOUT, "a100-40gb", 1e-6)


def test_the_deepspeed_preset_comes_from_mt_nlg_on_280_nodes():
    # Smith et al. 2022 §2.4: 530B, t = 8, p = 35, 280 DGX A100 nodes, global batch 1,920: 60.1 s
    mt_nlg = TransformerModel("mt-nlg-530b", layers=105, hidden=20480, heads=128, seq=2048, vocab=51200)
    layout = Layout(tp=8, pp=35, dp=8, micro_batch=1, global_batch=1920, recompute="full", zero=1,
                    overlap_grad_reduce=False, precision="bf16")

    fitted = fit_step_time(mt_nlg, layout, "a100-80gb", 60.1)

    assert fitted.factor == pytest.approx(DEEPSPEED_PIPELINE.gemm_efficiency, rel=1e-3)
    assert get_framework("DeepSpeed-Pipeline") is DEEPSPEED_PIPELINE


def test_the_fsdp_preset_comes_from_torchtitans_llama3_70b():
    # pytorch/torchtitan docs/performance.md: Llama 3 70B, FSDP2 on 64 A100 80 GB, 331 tokens/s per GPU
    model = get_preset("llama3-70b-like")
    layout = Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=64, recompute="full", zero=3, schedule="none")

    fitted = fit_step_time(model, layout, "a100-80gb", model.seq / 331, SoftwareProfile("flash", flash_attention=True))

    assert fitted.factor == pytest.approx(FSDP.gemm_efficiency, rel=1e-3)
    with pytest.raises(ValueError, match="unknown framework 'jax'.*megatron-lm"):
        get_framework("jax")


def test_flash_attention_keeps_no_scores_for_the_backward():
    s, b, a = MODEL.seq, 2, MODEL.heads
    explicit = layer_activation_bytes(MODEL, b)
    flash = layer_activation_bytes(MODEL, b, flash=True)

    # softmax output, dropout mask and dropout output (5 bytes a score) give way to 4 bytes a query and head
    assert explicit - flash == 5 * a * s * s * b - 4 * a * s * b


def write(tmp_path, text: str):
    path = tmp_path / "step.yaml"
    path.write_text(text)
    return path


GOOD = """model: gpt3-1.3b
gpu_type: a100-40gb
gpus: 8
global_batch: 64
layout: {tp: 1, pp: 1, micro_batch: 4, recompute: selective, zero: 1}
step_time_s: 1.9
"""


def test_a_measurement_file_names_its_layout(tmp_path):
    measurement = read_measurement(write(tmp_path, GOOD))

    assert measurement.layout == LAYOUT
    assert measurement.model == MODEL and measurement.step_time_s == 1.9


@pytest.mark.parametrize("change, message", [
    (("step_time_s: 1.9", "step_time_s: -2"), "step_time_s must be a positive number"),
    (("gpus: 8\n", ""), "missing field 'gpus'"),
    (("micro_batch: 4", "micro_batch: 3"), "layout: global batch 64 is not divisible by micro-batch"),
    (("recompute: selective", "recompute: some"), "layout: recompute must be one of"),
    (("gpu_type: a100-40gb", "gpu_type: tpu"), "gpu_type: unknown GPU type 'tpu'"),
    (("zero: 1}", "zero: 1, sharding: 3}"), "layout.sharding: unknown field"),
])
def test_a_bad_measurement_file_names_the_field(tmp_path, change, message):
    path = write(tmp_path, GOOD.replace(*change))

    with pytest.raises(InputError, match=message) as err:
        read_measurement(path)
    assert str(path) in str(err.value)


def test_plan_fits_to_the_measured_file_and_predicts_another_gpu_count(tmp_path):
    path = write(tmp_path, GOOD)
    runner = CliRunner()

    table = runner.invoke(app, ["plan", "--measured", str(path), "--gpus", "16", "--global-batch", "128", "--top", "2"])
    one = runner.invoke(app, ["plan", "--measured", str(path), "--gpus", "16", "--global-batch", "128", "--tp", "1",
                              "--pp", "1", "--micro-batch", "4", "--recompute", "selective", "--zero", "1", "--json"])
    bad = runner.invoke(app, ["plan", "--measured", str(write(tmp_path, GOOD.replace("gpus: 8", "gpus: x")))])

    assert table.exit_code == 0, table.output
    assert "calibrated on" in table.stdout and "gpt3-1.3b" in table.stdout and "a100-40gb" in table.stdout
    data = json.loads(one.stdout)
    assert data["calibration"]["measured_step_s"] == 1.9 and data["software"] == "calibrated"
    assert data["step_time_s"] > 1.9 * 0.9  # twice the GPUs and twice the batch: about the same step
    assert bad.exit_code == 2 and "gpus must be a positive whole number" in bad.output
    assert "Traceback" not in bad.output


FLAGS = ["--preset", "gpt3-1.3b", "--gpu-type", "a100-40gb", "--measured-step-s", "1.9", "--measured-gpus", "8",
         "--measured-global-batch", "64", "--measured-layout", "tp=1,pp=1,micro_batch=4,recompute=selective,zero=1"]
ONE_LAYOUT = ["--gpus", "16", "--global-batch", "128", "--tp", "1", "--pp", "1", "--micro-batch", "4",
              "--recompute", "selective", "--zero", "1", "--json"]


def test_plan_calibrates_from_flags_as_from_the_same_measurement_in_a_file(tmp_path):
    runner = CliRunner()
    from_file = runner.invoke(app, ["plan", "--measured", str(write(tmp_path, GOOD + "memory_gb: 30\n")),
                                    *ONE_LAYOUT])
    from_flags = runner.invoke(app, ["plan", *FLAGS, "--measured-memory-gb", "30", *ONE_LAYOUT])

    assert from_flags.exit_code == 0, from_flags.output
    file_data, flag_data = json.loads(from_file.stdout), json.loads(from_flags.stdout)
    assert flag_data["calibration"]["measured_step_s"] == 1.9
    assert flag_data["calibration"]["factor"] == pytest.approx(file_data["calibration"]["factor"])
    assert flag_data["step_time_s"] == pytest.approx(file_data["step_time_s"])
    assert flag_data["memory_gb_per_gpu"] == pytest.approx(file_data["memory_gb_per_gpu"])


@pytest.mark.parametrize("change, message", [
    (("--measured-layout", "tp=1,pp=1,micro_batch=4,recompute=selective,zero=1"), "needs the layout it was measured"),
    (("tp=1,pp=1,micro_batch=4,recompute=selective,zero=1", "tp=1,pp=1,micro_batch=3"),
     "--measured-layout: global batch 64 is not divisible by micro-batch"),
    (("tp=1,pp=1,micro_batch=4,recompute=selective,zero=1", "tp=1,sharding=3"), "layout.sharding: unknown field"),
    (("tp=1,pp=1,micro_batch=4,recompute=selective,zero=1", "tp=two"), "layout.tp must be a whole number, got 'two'"),
    (("1.9", "-1"), "--measured-step-s: the step time must be a positive number"),
    (("--measured-step-s", "1.9"), "--measured-layout describes a measured step: give its time with --measured-step-s"),
])
def test_bad_measured_flags_name_the_option(change, message):
    args = list(FLAGS)
    if change[0] in ("--measured-layout", "--measured-step-s"):
        i = args.index(change[0])
        del args[i:i + 2]
    else:
        args[args.index(change[0])] = change[1]
    result = CliRunner().invoke(app, ["plan", *args, "--top", "1"])

    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_a_file_and_flags_together_are_refused(tmp_path):
    result = CliRunner().invoke(app, ["plan", "--measured", str(write(tmp_path, GOOD)), *FLAGS])
    assert result.exit_code == 2 and "not both" in result.output
