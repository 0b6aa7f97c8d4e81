"""Fit the software-efficiency terms to one measured step, and read the file that holds it.

A user who timed one layout on their own cluster knows what no datasheet says: how fast their
framework runs. :func:`fit_step_time` finds the factor ``f`` on the GEMM and kernel rates of a
base profile (a framework preset, :mod:`apportion.perf.software`) for which the model predicts
exactly the measured step time, and, given the measured memory, the bytes per GPU beyond the
model (``memory_overhead_gb``). Everything else (collectives, the pipeline schedule, memory
formulas) stays the model's, so the fitted profile predicts other layouts, GPU counts and batch
sizes. The step time falls as ``f`` grows, so one measurement fixes ``f`` (Brent's method on
``log f``).

A measurement file (YAML or JSON) names the model, the GPUs, the layout and what was measured::

    model: gpt3-1.3b            # a preset, or {family, layers, hidden, heads, seq, vocab, ...}
    gpu_type: a100-80gb
    gpus: 8
    global_batch: 64
    layout: {tp: 1, pp: 1, micro_batch: 8, recompute: selective, zero: 1}
    step_time_s: 1.42           # seconds per iteration, averaged after warm-up
    memory_gb: 41.3             # optional: peak GPU memory per GPU
    framework: megatron-lm      # optional: the preset whose other terms are kept

``apportion profile`` writes the other kind, kernel timings of one device (``kernels:``), and
with several devices (or ``--processes``) collective timings among them, which
:func:`fit_kernels` turns into GEMM, kernel and collective rates.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from apportion.core.errors import InputError
from apportion.perf.accelerators import Accelerator, get_accelerator
from apportion.perf.roofline import BYTES, Gemm, gemm_time, memory_time
from apportion.perf.memory import GB
from apportion.perf.parallel import Layout, layout_problems
from apportion.perf.planner import default_precision
from apportion.perf.software import MEGATRON_LM, SoftwareProfile, get_framework
from apportion.perf.step import predict
from apportion.perf.transformer import TransformerModel, build_model

FACTOR_RANGE = (1 / 50, 50.0)


@dataclass(frozen=True)
class Calibration:
    """A profile fitted to one measurement, with what it was fitted to."""

    profile: SoftwareProfile
    factor: float  # the fitted multiplier on the base profile's GEMM and kernel rates
    base: SoftwareProfile
    measured_step_s: float | None = None
    predicted_step_s: float | None = None  # the base profile's prediction of the measured layout
    measured_memory_gb: float | None = None
    predicted_memory_gb: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"profile": self.profile.as_dict(), "factor": self.factor, "base": self.base.name,
                "measured_step_s": self.measured_step_s, "uncalibrated_step_s": self.predicted_step_s,
                "measured_memory_gb": self.measured_memory_gb, "uncalibrated_memory_gb": self.predicted_memory_gb,
                "notes": list(self.notes)}


def fit_step_time(model: TransformerModel, layout: Layout, accelerator: Accelerator | str, measured_step_s: float,
                  base: SoftwareProfile = MEGATRON_LM, measured_memory_gb: float | None = None,
                  name: str = "calibrated") -> Calibration:
    """The profile whose prediction of ``layout`` is ``measured_step_s`` (and ``measured_memory_gb``).

    ValueError when the measurement is not positive, the layout is invalid, or no factor within
    ``FACTOR_RANGE`` reaches the measured time (the step is then dominated by what the factor does
    not scale: communication or host time the model does not see).
    """
    from scipy.optimize import brentq

    acc = get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    if not (measured_step_s > 0 and math.isfinite(measured_step_s)):
        raise ValueError(f"the measured step time must be a positive number of seconds, got {measured_step_s!r}")
    uncalibrated = predict(model, layout, acc, base)

    def gap(log_f: float) -> float:
        return math.log(predict(model, layout, acc, base.scaled(math.exp(log_f))).step_time_s / measured_step_s)

    lo, hi = math.log(FACTOR_RANGE[0]), math.log(FACTOR_RANGE[1])
    if gap(lo) < 0 or gap(hi) > 0:
        fastest = predict(model, layout, acc, base.scaled(FACTOR_RANGE[1])).step_time_s
        slowest = predict(model, layout, acc, base.scaled(FACTOR_RANGE[0])).step_time_s
        raise ValueError(f"a measured step of {measured_step_s:.4g} s is outside what the model can fit for this "
                         f"layout ({fastest:.4g} to {slowest:.4g} s with the GEMM and kernel rates scaled "
                         f"{FACTOR_RANGE[0]:g} to {FACTOR_RANGE[1]:g} times)")
    factor = math.exp(brentq(gap, lo, hi, xtol=1e-10))
    source = (f"fitted to {model.name}, {layout.describe()} on {layout.gpus} × {acc.name}: "
              f"{measured_step_s:.4g} s per step (the {base.name} profile predicted {uncalibrated.step_time_s:.4g} s)")
    profile = base.scaled(factor, name=name, source=source)
    predicted_gb = None
    notes = []
    if measured_memory_gb is not None:
        if not (measured_memory_gb > 0 and math.isfinite(measured_memory_gb)):
            raise ValueError(f"the measured memory must be a positive number of GB, got {measured_memory_gb!r}")
        without = replace(profile, memory_overhead_gb=0.0)
        predicted_gb = predict(model, layout, acc, without).memory.total / GB
        profile = replace(profile, memory_overhead_gb=measured_memory_gb - predicted_gb)
        if measured_memory_gb < predicted_gb:
            notes.append(f"measured memory {measured_memory_gb:.1f} GB is below the model's {predicted_gb:.1f} GB: "
                         "the model counts more than this framework keeps")
    return Calibration(profile, factor, base, measured_step_s, uncalibrated.step_time_s, measured_memory_gb,
                       predicted_gb, notes)


def fit_kernels(kernels: list[dict], accelerator: Accelerator | str, base: SoftwareProfile = MEGATRON_LM,
                name: str = "profiled") -> Calibration:
    """GEMM, kernel and collective rates from measured times on one machine (``apportion profile``'s file).

    Each GEMM entry ``{kind: gemm, m, n, k, batch, precision, seconds}`` is priced by the model's
    roofline; the GEMM rate is the model's total time over the measured total (time-weighted, so
    the large products that dominate a step count most). Entries ``{kind: memory, bytes, seconds}``
    give the memory-bound kernels' rate the same way; without them it follows the GEMMs'. Entries
    ``{kind: allreduce or alltoall, bytes, ranks, seconds}`` (collectives among ``ranks`` devices of
    one machine) give ``comm_efficiency`` the same way; without them it stays the base profile's.
    """
    from apportion.perf.parallel import Group, allreduce_time, alltoall_time

    acc = get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    model_gemm = measured_gemm = model_mem = measured_mem = model_comm = measured_comm = 0.0
    for entry in kernels:
        seconds = float(entry["seconds"])
        if entry["kind"] == "gemm":
            precision = entry.get("precision", default_precision(acc))
            shape = Gemm(int(entry["m"]), int(entry["n"]), int(entry["k"]), int(entry.get("batch", 1)))
            model_gemm += gemm_time(shape, acc, precision).seconds
            measured_gemm += seconds
        elif entry["kind"] == "memory":
            model_mem += memory_time(float(entry["bytes"]), acc)
            measured_mem += seconds
        elif entry["kind"] in ("allreduce", "alltoall"):
            ranks = int(entry["ranks"])
            timed = allreduce_time if entry["kind"] == "allreduce" else alltoall_time
            model_comm += timed(float(entry["bytes"]), Group(ranks, ranks), acc)
            measured_comm += seconds
    if measured_gemm <= 0:
        raise ValueError("the kernel measurements hold no timed GEMM to fit the GEMM rate to")
    gemm_factor = model_gemm / measured_gemm
    kernel_factor = model_mem / measured_mem if measured_mem > 0 else gemm_factor
    comm = base.comm_efficiency * model_comm / measured_comm if measured_comm > 0 else base.comm_efficiency
    comm_text = f", collectives at {comm:.3g} × the model's bandwidth" if measured_comm > 0 else ""
    profile = replace(base, name=name, gemm_efficiency=base.gemm_efficiency * gemm_factor,
                      kernel_efficiency=base.kernel_efficiency * kernel_factor, comm_efficiency=comm,
                      source=f"fitted to {len(kernels)} kernel timings on {acc.name}: GEMMs at {gemm_factor:.3g} × "
                             f"the model's rate, memory-bound kernels at {kernel_factor:.3g} ×{comm_text}")
    return Calibration(profile, gemm_factor, base)


# ---------------------------------------------------------------------------------------------
# the measurement file

LAYOUT_FIELDS = {"tp": int, "pp": int, "micro_batch": int, "recompute": str, "sequence_parallel": bool,
                 "zero": int, "offload": bool, "schedule": str, "virtual_stages": int, "overlap_grad_reduce": bool,
                 "precision": str, "stage_layers": list}
MODEL_FIELDS = ("family", "layers", "hidden", "heads", "seq", "vocab", "ffn_hidden", "kv_heads", "name")


@dataclass(frozen=True)
class Measurement:
    """What a measurement file says: a model and layout with its step time, or kernel timings."""

    path: str
    gpu_type: str
    model: TransformerModel | None = None
    layout: Layout | None = None
    step_time_s: float | None = None
    memory_gb: float | None = None
    framework: SoftwareProfile = MEGATRON_LM
    kernels: tuple[dict, ...] = ()

    def calibrate(self) -> Calibration:
        """The profile this measurement fits (a step time, else the kernel timings)."""
        if self.step_time_s is not None:
            return fit_step_time(self.model, self.layout, self.gpu_type, self.step_time_s, self.framework,
                                 self.memory_gb)
        return fit_kernels(list(self.kernels), self.gpu_type, self.framework)


def read_measurement(path: str | Path) -> Measurement:
    """Read a measurement file; InputError naming the file and the field for anything wrong."""
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(source, f"cannot read the measurement file: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)  # JSON first: YAML 1.1 reads a number such as 1e-06 as text
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(source, f"not valid YAML or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(source, "a measurement file holds a mapping (model, gpu_type, layout, step_time_s, …)")
    known = {"model", "gpu_type", "gpus", "global_batch", "layout", "step_time_s", "memory_gb", "framework", "kernels",
             "device", "note", "torch"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(source, f"unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})")
    try:
        gpu_type = get_accelerator(str(data.get("gpu_type", ""))).name
    except ValueError as exc:
        raise InputError(source, f"gpu_type: {exc}") from None
    framework = MEGATRON_LM
    if "framework" in data:
        try:
            framework = get_framework(str(data["framework"]))
        except ValueError as exc:
            raise InputError(source, f"framework: {exc}") from None
    if "kernels" in data and "step_time_s" not in data:
        kernels = data["kernels"]
        if not isinstance(kernels, list) or not kernels:
            raise InputError(source, "kernels: a list of timed kernels is needed")
        for i, entry in enumerate(kernels):
            _check_kernel(source, i, entry)
        return Measurement(source, gpu_type, framework=framework, kernels=tuple(kernels))

    for required in ("model", "gpus", "global_batch", "layout", "step_time_s"):
        if required not in data:
            raise InputError(source, f"missing field '{required}' (a step measurement names the model, gpus, "
                                     "global_batch, layout and step_time_s)")
    model = _model(source, data["model"])
    gpus, batch = _positive_int(source, "gpus", data["gpus"]), _positive_int(source, "global_batch",
                                                                             data["global_batch"])
    layout = _layout(source, data["layout"], gpus, batch, gpu_type)
    problems = layout_problems(model, layout)
    if problems:
        raise InputError(source, f"layout: {problems[0]}")
    step = _positive_number(source, "step_time_s", data["step_time_s"])
    memory = _positive_number(source, "memory_gb", data["memory_gb"]) if data.get("memory_gb") is not None else None
    return Measurement(source, gpu_type, model, layout, step, memory, framework)


def step_measurement(model: TransformerModel, gpu_type: str, gpus: int, global_batch: int, layout: str,
                     step_time_s: float, memory_gb: float | None = None,
                     framework: SoftwareProfile = MEGATRON_LM) -> Measurement:
    """A step measurement given on the command line rather than in a file: ``layout`` is text
    such as ``tp=2,pp=4,micro_batch=1,recompute=selective`` (``stage_layers`` with ``/`` between
    stages). InputError naming the option for anything wrong."""
    fields = parse_layout_text(layout)
    gpus = _positive_int("--measured-gpus", "the GPU count", gpus)
    global_batch = _positive_int("--measured-global-batch", "the global batch", global_batch)
    parsed = _layout("--measured-layout", fields, gpus, global_batch, gpu_type)
    problems = layout_problems(model, parsed)
    if problems:
        raise InputError("--measured-layout", problems[0])
    step = _positive_number("--measured-step-s", "the step time", step_time_s)
    memory = _positive_number("--measured-memory-gb", "the memory", memory_gb) if memory_gb is not None else None
    return Measurement("the command line", get_accelerator(gpu_type).name, model, parsed, step, memory, framework)


def parse_layout_text(text: str) -> dict:
    """``tp=2,pp=4,micro_batch=1,recompute=selective,stage_layers=7/8x14/7`` as the fields of a
    layout mapping, each of its type; InputError naming ``--measured-layout`` otherwise."""
    from apportion.perf.parallel import parse_stage_layers

    fields: dict = {}
    for part in (p.strip() for p in text.replace(" ", ",").split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not raw.strip():
            raise InputError("--measured-layout", f"'{part}' is not key=value (e.g. tp=2,pp=4,micro_batch=1)")
        if key not in LAYOUT_FIELDS:
            raise InputError("--measured-layout", f"layout.{key}: unknown field (known: {', '.join(LAYOUT_FIELDS)})")
        kind, raw = LAYOUT_FIELDS[key], raw.strip()
        if kind is int:
            if not raw.isdigit():
                raise InputError("--measured-layout", f"layout.{key} must be a whole number, got '{raw}'")
            fields[key] = int(raw)
        elif kind is bool:
            if raw.lower() not in ("true", "false", "yes", "no", "1", "0"):
                raise InputError("--measured-layout", f"layout.{key} must be true or false, got '{raw}'")
            fields[key] = raw.lower() in ("true", "yes", "1")
        elif kind is list:
            try:
                fields[key] = list(parse_stage_layers(raw.replace("/", ",")))
            except ValueError as exc:
                raise InputError("--measured-layout", f"layout.{key}: {exc}") from None
        else:
            fields[key] = raw
    if not fields:
        raise InputError("--measured-layout", "no layout given (e.g. tp=2,pp=4,micro_batch=1)")
    return fields


def _check_kernel(source: str, i: int, entry) -> None:
    where = f"kernels[{i}]"
    kinds = ("gemm", "memory", "allreduce", "alltoall")
    if not isinstance(entry, dict) or entry.get("kind") not in kinds:
        raise InputError(source, f"{where}: each kernel is a mapping with kind {', '.join(kinds[:-1])} or {kinds[-1]}")
    needed = {"gemm": ("m", "n", "k", "seconds"), "memory": ("bytes", "seconds"),
              "allreduce": ("bytes", "ranks", "seconds"), "alltoall": ("bytes", "ranks", "seconds")}[entry["kind"]]
    for key in needed:
        value = entry.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise InputError(source, f"{where}.{key} must be a positive number, got {value!r}")
    if "ranks" in needed and not (isinstance(entry["ranks"], int) and entry["ranks"] >= 2):
        raise InputError(source, f"{where}.ranks must be a whole number of at least 2, got {entry['ranks']!r}")
    if entry["kind"] == "gemm" and entry.get("precision", "bf16") not in BYTES:
        raise InputError(source, f"{where}.precision must be one of {', '.join(BYTES)}, got {entry['precision']!r}")


def _model(source: str, value) -> TransformerModel:
    try:
        if isinstance(value, str):
            return build_model(preset=value)
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(MODEL_FIELDS) - {"preset"})
            if unknown:
                raise ValueError(f"unknown field '{unknown[0]}' (known: preset, {', '.join(MODEL_FIELDS)})")
            fields = {k: v for k, v in value.items() if k not in ("preset", "family")}
            return build_model(value.get("family", "gpt"), value.get("preset"), **fields)
    except (ValueError, TypeError) as exc:
        raise InputError(source, f"model: {exc}") from None
    raise InputError(source, "model: a preset name or a mapping of layers, hidden, heads, …")


def _layout(source: str, value, gpus: int, batch: int, gpu_type: str) -> Layout:
    if not isinstance(value, dict):
        raise InputError(source, "layout: a mapping of tp, pp, micro_batch, recompute, …")
    fields = {}
    for key, raw in value.items():
        if key not in LAYOUT_FIELDS:
            raise InputError(source, f"layout.{key}: unknown field (known: {', '.join(LAYOUT_FIELDS)})")
        kind = LAYOUT_FIELDS[key]
        if kind is int and (not isinstance(raw, int) or isinstance(raw, bool) or raw < 0):
            raise InputError(source, f"layout.{key} must be a whole number, got {raw!r}")
        if kind is bool and not isinstance(raw, bool):
            raise InputError(source, f"layout.{key} must be true or false, got {raw!r}")
        if kind is str and not isinstance(raw, str):
            raise InputError(source, f"layout.{key} must be text, got {raw!r}")
        if kind is list:
            if not isinstance(raw, list) or not all(isinstance(n, int) for n in raw):
                raise InputError(source, f"layout.{key} must be a list of layer counts, got {raw!r}")
            raw = tuple(raw)
        fields[key] = raw
    tp, pp = fields.get("tp", 1), fields.get("pp", len(fields.get("stage_layers", ())) or 1)
    if tp < 1 or pp < 1 or gpus % (tp * pp):
        raise InputError(source, f"layout: {gpus} GPUs are not divisible by tensor × pipeline-parallel size "
                                 f"({tp} × {pp})")
    fields.setdefault("precision", default_precision(get_accelerator(gpu_type)))
    if "schedule" not in fields:
        fields["schedule"] = ("interleaved" if fields.get("virtual_stages", 1) > 1 else "1f1b") if pp > 1 else "none"
    fields.update(tp=tp, pp=pp)
    return Layout(dp=gpus // (tp * pp), global_batch=batch, **fields)


def _positive_int(source: str, name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(source, f"{name} must be a positive whole number, got {value!r}")
    return value


def _positive_number(source: str, name: str, value) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (value > 0 and math.isfinite(value)):
        raise InputError(source, f"{name} must be a positive number, got {value!r}")
    return float(value)
