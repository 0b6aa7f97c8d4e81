"""How fast a GEMM of a given shape, or a memory-bound kernel, runs on an accelerator.

A GEMM's time is the larger of a compute time and a memory time (the roofline):

* compute: cuBLAS splits C[m, n] into output tiles, one thread block per tile, and runs them
  in *waves* of one tile per SM (NVIDIA, "Matrix Multiplication Background User's Guide",
  DU-09799-001, §2.3 and §3: tile quantisation and wave quantisation). A wave of tiles takes
  ``2·Tm·Tn·k / (ceiling · peak / SMs)`` seconds, so a GEMM takes
  ``ceil(tiles / SMs)`` such waves. The model tries the three large tiles the guide names as
  the most efficient (256×128, 128×256, 128×128) and keeps the fastest, as cuBLAS's heuristics
  would. Small or oddly shaped GEMMs lose to padding (partial tiles) and to a last, partly
  empty wave; large ones approach the ceiling.
* memory: the operands and result must cross HBM once: ``bytes·(mk + kn + mn) / (η_mem · BW)``.
  Skinny GEMMs (attention's ``k = head_dim`` products, small micro-batches) end up here.

``ceiling`` is the fraction of the datasheet peak that the best-shaped large GEMM reaches on
that GPU, taken from a published measurement, never from the validation table:

* A100 SXM: 267.9 of 312 TFLOP/s bf16 = 0.859; H100 SXM: 792.1 of 989 = 0.801. Stas Bekman,
  *Machine Learning Engineering*, "Maximum Achievable Matmul FLOPS comparison table"
  (github.com/stas00/ml-engineering, compute/accelerator/README.md), measured with
  ``mamf-finder.py`` under CUDA 12.1. The H200 has the H100's compute die and clocks and gets
  the H100's figure.
* Other GPUs: 0.80, the lower end of "optimized GEMM can reach up to 80-90% of the theoretical
  maximum device throughput" (Dao, "FlashAttention-2", 2023, §1).

``η_mem`` = 0.90: the best streaming kernels reach about 90% of an A100's datasheet HBM
bandwidth (NVIDIA developer forum, "Trouble to reach peak bandwidth of A100", which measures
1.80 of 2.04 TB/s, 88%, and cites a GTC talk's ~90% maximum). Used for every GPU.

Two kernel families of the explicit (non-flash) attention reach less than that, and for them
there is a published measurement of exactly the kernels Megatron-LM runs: Dao et al.,
"FlashAttention" (NeurIPS 2022, arXiv 2205.14135), Appendix E.6, Tables 11, 14, 17 and 20,
time Megatron-LM's attention (``baddbmm`` for QKᵀ, the fused scale-mask-softmax, PyTorch
dropout, ``bmm`` for the scores·V, and the backward of all of them) on one A100-SXM4-40GB
(1,555 GB/s), fp16, batch 16, 8 heads of 64, sequence 2,048, forward + backward:

* with masking, no dropout: 12.39 ms (no masking: 13.21 ms). This model, pricing the six
  batched GEMMs by the roofline above and the softmax at 2e and 3e bytes per score (forward,
  backward) at η_mem = 0.90, predicts 8.73 ms: the attention core runs at
  ``ATTENTION_CORE_EFFICIENCY`` = 0.90 × 8.73 / 12.39 = 0.634 of the datasheet bandwidth.
  The six GEMMs (k = head size, or an s × s operand) are all memory-bound here, so the figure
  applies to their memory roof and to the softmax.
* dropout on the s × s probabilities adds 4.11 ms (16.50 − 12.39, with masking) and 4.20 ms
  (17.41 − 13.21, without); the model's (2e + 1) bytes per score each way predict 3.84 ms:
  ``DROPOUT_EFFICIENCY`` = 0.90 × 3.84 / 4.155 = 0.831.

These are measurements of the same code on the same GPU family, not fitted to the validation
table; ``tests/perf`` re-derives both from the published timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from apportion.perf.accelerators import Accelerator

# Streaming multiprocessors per GPU (one die), from NVIDIA's architecture whitepapers / datasheets.
SM_COUNTS: dict[str, int] = {
    "k80": 13,  # GK210: 13 SMX per GPU (Tesla K80 board = 2 × GK210)
    "p100": 56,  # GP100 as shipped in Tesla P100: 56 SMs (Pascal whitepaper)
    "v100": 80,  # GV100 as shipped in Tesla V100: 80 SMs (Volta whitepaper)
    "t4": 40,  # TU104 as shipped in T4: 40 SMs (Turing whitepaper)
    "a100-40gb": 108,  # GA100 as shipped in A100: 108 SMs (Ampere whitepaper)
    "a100-80gb": 108,
    "h100": 132,  # GH100 as shipped in H100 SXM5: 132 SMs (Hopper whitepaper)
    "h200": 132,  # same GH100 configuration as H100 SXM5
    "cpu": 2,  # the catalog's 2-core host: one "tile" per core
}

# Fraction of datasheet peak reached by the best large GEMM (see the module docstring).
GEMM_CEILING: dict[str, float] = {
    "a100-40gb": 267.9 / 312,
    "a100-80gb": 267.9 / 312,
    "h100": 792.1 / 989,
    "h200": 792.1 / 989,
}
DEFAULT_GEMM_CEILING = 0.80
MEMORY_EFFICIENCY = 0.90
# Megatron-LM's explicit attention core (batched GEMMs with k = head size, fused softmax) and the
# dropout on its s × s probabilities, measured by Dao et al. 2022 (see the module docstring).
ATTENTION_CORE_EFFICIENCY = 0.634
DROPOUT_EFFICIENCY = 0.831

# cuBLAS's most efficient tile shapes (Matrix Multiplication Background User's Guide, §2.3).
TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))

# bytes per operand element; an fp8 product's bf16 output is counted at 1 byte too (its memory
# roof slightly optimistic)
BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def sm_count(acc: Accelerator) -> int:
    return SM_COUNTS.get(acc.name, 80)


def gemm_ceiling(acc: Accelerator) -> float:
    return GEMM_CEILING.get(acc.name, DEFAULT_GEMM_CEILING)


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    bound: str  # "compute" or "memory"


@lru_cache(maxsize=65536)
def _gemm(m: int, n: int, k: int, batch: int, sms: int, rate_per_sm: float, bytes_per: int,
          bandwidth: float) -> tuple[float, str]:
    best = float("inf")
    for tm, tn in TILES:
        tiles = batch * ceil(m / tm) * ceil(n / tn)
        waves = ceil(tiles / sms)
        best = min(best, waves * 2.0 * tm * tn * k / rate_per_sm)
    memory = bytes_per * batch * (m * k + k * n + m * n) / bandwidth
    return (best, "compute") if best >= memory else (memory, "memory")


def gemm_time(m: int, n: int, k: int, acc: Accelerator, precision: str = "bf16", batch: int = 1,
              memory_efficiency: float = MEMORY_EFFICIENCY) -> KernelTime:
    """Seconds for ``batch`` products of [m, k]·[k, n] at ``precision`` on ``acc``.

    ``memory_efficiency`` is the fraction of the datasheet bandwidth the memory roof assumes
    (``ATTENTION_CORE_EFFICIENCY`` for the attention core's batched GEMMs).
    """
    if min(m, n, k, batch) <= 0:
        return KernelTime(0.0, "compute")
    sms = sm_count(acc)
    rate = gemm_ceiling(acc) * acc.peak(precision) / sms
    seconds, bound = _gemm(m, n, k, batch, sms, rate, BYTES.get(precision, 2),
                           memory_efficiency * acc.memory_bandwidth)
    return KernelTime(seconds, bound)


def gemm_efficiency(m: int, n: int, k: int, acc: Accelerator, precision: str = "bf16", batch: int = 1) -> float:
    """Achieved fraction of the datasheet peak for this shape (≤ the GPU's ceiling)."""
    t = gemm_time(m, n, k, acc, precision, batch).seconds
    return 2.0 * m * n * k * batch / t / acc.peak(precision) if t > 0 else 0.0


# FlashAttention-2's forward + backward rate as a fraction of the dense fp16/bf16 peak (Dao,
# "FlashAttention-2", arXiv 2307.08691: 50–73% of the A100's peak, the middle taken; "up to 335
# TFLOPs/s" on an H100 SXM5 without Hopper-specific instructions: 335 / 989 = 0.34, also for H200).
FLASH_ATTENTION_EFFICIENCY: dict[str, float] = {
    "a100-40gb": 0.60,
    "a100-80gb": 0.60,
    "h100": 335 / 989,
    "h200": 335 / 989,
}
DEFAULT_FLASH_ATTENTION_EFFICIENCY = 0.50


def flash_attention_efficiency(acc: Accelerator) -> float:
    return FLASH_ATTENTION_EFFICIENCY.get(acc.name, DEFAULT_FLASH_ATTENTION_EFFICIENCY)


def memory_time(nbytes: float, acc: Accelerator, efficiency: float = MEMORY_EFFICIENCY) -> float:
    """Seconds for a bandwidth-bound kernel that moves ``nbytes`` through HBM at ``efficiency``."""
    return nbytes / (efficiency * acc.memory_bandwidth)
