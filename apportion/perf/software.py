"""How far a training framework runs from the hardware model: the software-efficiency terms.

The step model (:mod:`apportion.perf.step`) prices every kernel from its shape and the GPU's
datasheet, as Megatron-LM's 2021 kernels ran. Other stacks run the same arithmetic faster or
slower: a pipeline engine with more host work per micro-batch, FlashAttention instead of the
explicit s × s scores, collectives through another library. A :class:`SoftwareProfile` names
those differences as a few terms the prediction multiplies or adds:

* ``gemm_efficiency``: the rate of every matrix product (and of a fused attention kernel),
  relative to the model's roofline (1.0 = the catalog's GEMM ceilings, :mod:`apportion.perf.roofline`);
* ``kernel_efficiency``: the rate of the memory-bound kernels (norms, softmax, dropout,
  activations, optimizer and accumulation sweeps);
* ``comm_efficiency``: the bandwidth of every collective and pipeline send;
* ``flash_attention``: the attention core as one fused kernel (FlashAttention-2: FLOPs at a
  measured fraction of the peak, no s × s scores kept for the backward);
* ``microbatch_overhead_s``: host-side seconds per micro-batch on each pipeline stage
  (scheduling, Python, launches the GPU waits for);
* ``memory_overhead_gb``: bytes on every GPU beyond the model (CUDA context, communication
  buffers, the allocator's fragmentation).

A profile is either a named preset (:data:`FRAMEWORKS`, each with its source) or fitted to one
measured step (:mod:`apportion.perf.calibrate`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class SoftwareProfile:
    """Multipliers and additions a framework applies to the hardware model (see the module docstring)."""

    name: str = "megatron-lm"
    gemm_efficiency: float = 1.0
    kernel_efficiency: float = 1.0
    comm_efficiency: float = 1.0
    flash_attention: bool = False
    microbatch_overhead_s: float = 0.0
    memory_overhead_gb: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("gemm_efficiency", "kernel_efficiency", "comm_efficiency"):
            value = getattr(self, field_name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{field_name} must be a positive number, got {value!r}")
        if not self.microbatch_overhead_s >= 0:
            raise ValueError(f"microbatch_overhead_s must be at least 0, got {self.microbatch_overhead_s!r}")

    @property
    def is_hardware_model(self) -> bool:
        """True when the profile changes nothing in the prediction."""
        return (self.gemm_efficiency == self.kernel_efficiency == self.comm_efficiency == 1.0
                and not self.flash_attention and self.microbatch_overhead_s == 0 and self.memory_overhead_gb == 0)

    def scaled(self, factor: float, name: str | None = None, source: str | None = None) -> "SoftwareProfile":
        """The same profile with its GEMM and kernel rates multiplied by ``factor``."""
        return replace(self, gemm_efficiency=self.gemm_efficiency * factor,
                       kernel_efficiency=self.kernel_efficiency * factor, name=name or self.name,
                       source=source if source is not None else self.source)

    def as_dict(self) -> dict:
        return asdict(self)


MEGATRON_LM = SoftwareProfile(
    "megatron-lm",
    source="the hardware model as built: Megatron-LM's 2021 kernels (explicit attention, fused softmax, "
           "bias-GeLU, bias-dropout-add, LayerNorm), NCCL collectives; validated on Narayanan et al. "
           "2021, Table 1 (benchmarks/accuracy/perf_validation.py)",
)

# Fitted by benchmarks/accuracy/perf_calibration.py (apportion.perf.calibrate.fit_step_time) to one published
# measurement each; tests/perf/test_software_profiles.py re-derives both from those measurements.
DEEPSPEED_PIPELINE = SoftwareProfile(
    "deepspeed-pipeline",
    gemm_efficiency=0.7098,
    kernel_efficiency=0.7098,
    source="Megatron-DeepSpeed (Megatron-LM's kernels, DeepSpeed's pipeline engine, ZeRO-1 assumed): rates "
           "fitted to Megatron-Turing NLG 530B on 280 DGX A100 nodes, 60.1 s per iteration (Smith et al. "
           "2022, arXiv 2201.11990, §2.4: t = 8, p = 35, d = 8, global batch 1,920, sequence 2,048, "
           "full recomputation, gradients reduced after the backward)",
)
FSDP = SoftwareProfile(
    "fsdp",
    gemm_efficiency=0.7998,
    kernel_efficiency=0.7998,
    flash_attention=True,
    source="PyTorch FSDP2 (ZeRO-3) with scaled-dot-product (flash) attention, as torchtitan runs it: rates "
           "fitted to Llama 3 70B on 64 A100 80 GB, 331 tokens/s per GPU (pytorch/torchtitan "
           "docs/performance.md: FSDP2, local batch 1, sequence 8,192, full activation checkpointing)",
)

FRAMEWORKS: dict[str, SoftwareProfile] = {p.name: p for p in (MEGATRON_LM, DEEPSPEED_PIPELINE, FSDP)}


def get_framework(name: str) -> SoftwareProfile:
    """The preset called ``name``; unknown names list the known ones."""
    try:
        return FRAMEWORKS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown framework '{name}' (known: {', '.join(FRAMEWORKS)})") from None
