"""Trace rows that name a model and a layout: a job kind whose speeds the perf model predicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.experiment import WorkloadSettings, load_inputs
from apportion.perf import Layout, get_preset, plan, predict
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.model_jobs import ModelJob, parse_layout, steps_per_s
from apportion.workloads.trace_csv import read_workload_csv, read_workload_with_models

HEADER = "job_id,submit_time_s,duration_s,num_gpus,kind,model,global_batch,layout\n"
GPT_ROW = "2,60,7200,8,,gpt3-1.3b,64,tp=2 pp=1 mb=2 recompute=full zero=1\n"
GPT_KIND = "gpt3-1.3b gb=64 tp=2 pp=1 mb=2 recompute=full zero=1"


def trace(tmp_path, *rows: str):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "".join(rows))
    return path


def test_a_model_row_runs_at_the_predicted_speed_of_its_layout(tmp_path):
    path = trace(tmp_path, "1,0,3600,4,resnet50/bs64,,,\n", GPT_ROW)

    jobs, table = read_workload_with_models(path, throughputs=builtin_throughputs())

    assert list(np.asarray(table.kinds)[jobs.kind]) == ["resnet50/bs64", GPT_KIND]
    one = predict(get_preset("gpt3-1.3b"), Layout(tp=2, pp=1, dp=4, micro_batch=2, global_batch=64,
                                                   recompute="full", zero=1, schedule="none", precision="bf16"),
                  "a100-40gb")
    rate = table.steps_per_s[table.kind_index(GPT_KIND), table.gpu_types.index("a100"), table.scales.index(8)]
    assert rate == pytest.approx(1 / one.step_time_s)
    # 2 hours on 8 v100s: the steps it needs at the v100's predicted speed
    v100 = table.steps_per_s[table.kind_index(GPT_KIND), table.gpu_types.index("v100"), table.scales.index(8)]
    assert jobs.total_steps[1] == pytest.approx(7200 * v100)


def test_where_the_layout_cannot_run_the_speed_is_unknown():
    job = ModelJob("gpt3-1.3b", 64, parse_layout("tp=2 pp=1 mb=2 recompute=full zero=1"))

    assert math.isnan(steps_per_s(job, "a100", 1))  # tp = 2 does not fit on one GPU
    assert math.isnan(steps_per_s(job, "k80", 2))  # 12 GB is too little for half the model
    assert steps_per_s(job, "h100", 2) > steps_per_s(job, "a100", 2) > 0
    assert math.isnan(steps_per_s(ModelJob("gpt3-1.3b", 64, parse_layout("tp=1 precision=fp8")), "a100", 8))


def test_auto_is_the_planners_best_layout():
    job = ModelJob("gpt3-350m", 32, parse_layout("auto"))
    best = plan(get_preset("gpt3-350m"), 4, "v100", 32, top=1, keep_rejected=False).best[0]

    assert job.kind == "gpt3-350m gb=32 auto"
    assert steps_per_s(job, "v100", 4) == pytest.approx(1 / best.step_time_s)


def test_a_trace_without_models_reads_as_before(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,kind\n1,0,60,1,lm/bs20\n2,5,60,2,\n")
    table = builtin_throughputs()

    jobs, same = read_workload_with_models(path, throughputs=table, seed=3)
    before = read_workload_csv(path, throughputs=table, seed=3)

    assert same is table
    np.testing.assert_array_equal(jobs.kind, before.kind)
    np.testing.assert_array_equal(jobs.total_steps, before.total_steps)


@pytest.mark.parametrize("row, field, message", [
    ("2,60,7200,8,lm/bs20,gpt3-1.3b,64,auto\n", "model", "either a job kind or a model, not both"),
    ("2,60,7200,8,,gpt3-1.3b,,auto\n", "global_batch", "positive whole global batch, got ''"),
    ("2,60,7200,8,,gpt3-1.3b,64,tp=2 pipes=3\n", "layout", "unknown layout key 'pipes'"),
    ("2,60,7200,8,,gpt-9,64,auto\n", "model", "unknown model preset 'gpt-9'"),
    ("2,60,7200,8,,gpt3-1.3b,64,tp=two\n", "layout", "invalid literal"),
    ("2,60,7200,8,,gpt3-1.3b,64,tp=0 pp=-1\n", "layout", "tensor-parallel size must be a positive integer, got 0"),
])
def test_a_bad_model_row_names_its_line_and_field(tmp_path, row, field, message):
    path = trace(tmp_path, "1,0,3600,4,resnet50/bs64,,,\n", row)

    with pytest.raises(InputError, match=message) as err:
        read_workload_with_models(path, throughputs=builtin_throughputs())
    assert err.value.line == 3 and err.value.field == field


@pytest.mark.parametrize("read", [read_workload_with_models, read_workload_csv])
def test_a_model_that_is_not_a_preset_is_named_before_its_missing_batch(tmp_path, read):
    path = trace(tmp_path, "1,0,3600,1,,resnet18,,\n")

    with pytest.raises(InputError, match="unknown model preset 'resnet18'") as err:
        read(path, throughputs=builtin_throughputs())
    assert err.value.line == 2 and err.value.field == "model"


def test_the_plain_reader_points_model_rows_to_the_one_that_predicts_them(tmp_path):
    with pytest.raises(InputError, match="read_workload_with_models"):
        read_workload_csv(trace(tmp_path, GPT_ROW), throughputs=builtin_throughputs())


def test_simulate_loads_model_rows_with_their_speeds(tmp_path):
    path = trace(tmp_path, "1,0,3600,4,resnet50/bs64,,,\n", GPT_ROW)

    inputs = load_inputs(WorkloadSettings(path=str(path), cluster="v100:8,a100:8"))

    assert GPT_KIND in inputs.throughputs.kinds and len(inputs.jobs.kind) == 2
