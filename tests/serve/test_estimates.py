"""Speeds the server assumes before it has measured a job: the prior table's, or the perf model's
for a job that names a model and layout."""

from __future__ import annotations

import math

import pytest

from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.store.state import StateStore
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.model_jobs import ModelJob, model_job_of_kind, steps_per_s


@pytest.fixture
def estimates(tmp_path):
    return ThroughputEstimates(StateStore(tmp_path / "state.db"), {"v100": 8, "h100": 8, "cpu": 2}, 1.0,
                               builtin_throughputs())


def test_a_model_kind_runs_at_the_perf_models_speed_on_each_slot_type(estimates):
    kind = "gpt3-1.3b gb=64 tp=1 pp=1 mb=1 recompute=full zero=1"  # fits a 16 GB v100
    job = model_job_of_kind(kind)
    on_v100, on_h100 = estimates.rate(kind, "v100", 8, None), estimates.rate(kind, "h100", 8, None)

    assert job == ModelJob("gpt3-1.3b", 64, (("tp", "1"), ("pp", "1"), ("mb", "1"), ("recompute", "full"),
                                             ("zero", "1")))
    assert on_v100 == steps_per_s(job, "v100", 8) and on_h100 == steps_per_s(job, "h100", 8)
    assert math.isfinite(on_v100) and on_h100 > 2 * on_v100  # the h100's bf16 against the v100's fp16
    estimates.record(kind, "v100", 8, 0.5, now=0.0)
    assert estimates.rate(kind, "v100", 8, None) == 0.5  # a measurement wins over the model


def test_where_the_model_says_the_layout_cannot_run_the_default_speed_stands(estimates):
    kind = "gpt3-1.3b gb=64 tp=4 pp=1 mb=4"  # 4-way tensor parallel on a 2-slot type
    assert math.isnan(steps_per_s(model_job_of_kind(kind), "cpu", 2))
    assert estimates.rate(kind, "cpu", 2, None) == 1.0


def test_other_kind_names_are_not_taken_for_models():
    assert model_job_of_kind("resnet50/bs64") is None
    assert model_job_of_kind("my job gb=64 tp=2") is None  # no such preset
    assert model_job_of_kind("gpt3-1.3b gb=x tp=2") is None
