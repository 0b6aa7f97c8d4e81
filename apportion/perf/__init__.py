"""Predict a training job's step time and memory on any accelerator and parallel layout.

Transformers (GPT, Llama-like, BERT) on tensor/pipeline/data-parallel layouts::

    from apportion.perf import Layout, get_preset, plan, predict

    model = get_preset("gpt3-175b")
    one = predict(model, Layout(tp=8, pp=8, dp=16, micro_batch=1, global_batch=1536,
                                recompute="full", schedule="interleaved", virtual_stages=2),
                  "a100-80gb")
    one.step_time_s, one.tflops_per_gpu, one.memory.as_gb(), one.fits
    best = plan(model, gpus=1024, accelerator="a100-80gb", global_batch=1536).best

See docs/perf.md for the model, its constants and their sources.
"""

from apportion.perf.calibrate import Calibration, fit_step_time, read_measurement
from apportion.perf.accelerators import ACCELERATORS, Accelerator, get_accelerator, list_price, list_prices
from apportion.perf.roofline import Gemm, gemm_efficiency, gemm_time
from apportion.perf.memory import (
    MemoryBreakdown,
    in_flight_microbatches,
    layer_activation_bytes,
    model_state_bytes,
)
from apportion.perf.parallel import Layout, check_layout, layout_problems
from apportion.perf.planner import Plan, Rejected, fixed_layout, plan
from apportion.perf.software import FRAMEWORKS, SoftwareProfile, get_framework
from apportion.perf.step import Prediction, predict
from apportion.perf.transformer import (
    PRESETS,
    TransformerModel,
    get_preset,
    iteration_flops,
    model_flops,
    parameter_count,
)

__all__ = [
    "ACCELERATORS",
    "Accelerator",
    "Calibration",
    "FRAMEWORKS",
    "Gemm",
    "SoftwareProfile",
    "fit_step_time",
    "get_framework",
    "read_measurement",
    "Layout",
    "MemoryBreakdown",
    "PRESETS",
    "Plan",
    "Prediction",
    "Rejected",
    "TransformerModel",
    "check_layout",
    "fixed_layout",
    "gemm_efficiency",
    "gemm_time",
    "get_accelerator",
    "get_preset",
    "in_flight_microbatches",
    "iteration_flops",
    "layer_activation_bytes",
    "layout_problems",
    "list_price",
    "list_prices",
    "model_flops",
    "model_state_bytes",
    "parameter_count",
    "plan",
    "predict",
]
