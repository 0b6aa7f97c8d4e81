"""How long a GEMM, or a memory-bound kernel, takes on an accelerator: the roofline both perf models price with.

A kernel's time is the larger of a compute time and a memory time (``roofline``)::

    time = max(FLOPs / (peak × ceiling × utilisation), bytes / (bandwidth × efficiency))

with the accelerator's datasheet peak at the precision asked for and its datasheet bandwidth,
both from its catalog entry (:mod:`apportion.perf.accelerators`), as are the chip figures
below (SMs, threads, clocks, GEMM ceiling). The transformer step model (``step.py``) times each
GEMM with ``gemm_time``; the per-layer model of the job kinds (``layers.py``) prices each layer
with ``roofline`` at a GEMM's ``gemm_utilisation``. They differ only in what the hardware runs:

* **Utilisation of a GEMM: tile and wave quantisation** (NVIDIA, "Matrix Multiplication
  Background User's Guide", DU-09799-001, §2.3 and §3). The library cuts C[m, n] into output
  tiles, one thread block each, one block per SM at a time, and runs them in *waves* of
  ``sms`` blocks; a partial tile at an edge computes zeros and a last, partly empty wave idles
  SMs: utilisation = useful share × blocks / (waves × sms) × the tile's rate, the best over the
  library's tiles. Two tile sets:

  - ``TENSOR_CORE_TILES``, the three large tiles the guide names as the most efficient
    (256×128, 128×256, 128×128), at one rate: cuBLAS's tensor-core GEMMs of the mixed-precision
    transformer model;
  - ``CUDA_CORE_TILES``, CUTLASS's CUDA-core SGEMM tiles from 128 × 128 (256 threads a block)
    down to 32 × 32 and the 16-wide tiles of its small-M/N kernels (github.com/NVIDIA/cutlass/
    issues/74; assumed to be the set cuBLAS chooses among), a smaller tile running at
    (area / 128²) ** 0.25 the rate (assumed), and split-K: when the output has fewer tiles than
    the GPU has SMs, the reduction is spread over at most ``sms // tiles`` slices of at least
    128 (an assumption: one tile edge). The FP32 kernels Gavel's job kinds ran.

  Each model keeps the set that predicts its published measurements better: with the tensor-core
  tiles the kinds miss Gavel's measured GPU ratios by 57% on average instead of 19%; with the
  CUDA-core tiles the transformer's MAPE on Megatron-LM's Table 1 is 11.47% instead of 11.46%.
  The CPU counts as ``sms`` = 2 cores, one tile at a time each.
* **Compute peak.** ``gemm_time`` takes the catalog's ``gemm_ceiling`` of the datasheet peak:
  the fraction the best-shaped large GEMM reaches, from a published measurement (the A100's and
  H100's, 0.859 and 0.801; 0.80 elsewhere, the lower end of Dao's "80-90%"), never from the
  validation table. The kinds, whose absolute times are not the point (only ratios between
  GPUs are), take ``sustained_peak``: the datasheet peak, and for FP32 on CUDA cores what one
  clock's issue fills at the clock the GPU holds under load (the K80: 128 of 192 lanes, at its
  base clock).
* **Memory.** ``gemm_time``'s operands and result cross HBM once, ``bytes·(mk + kn + mn)``, at
  ``η_mem`` = 0.90 of the datasheet bandwidth: the best streaming kernels reach about 90% of
  an A100's (NVIDIA developer forum, "Trouble to reach peak bandwidth of A100", which measures
  1.80 of 2.04 TB/s, 88%, and cites a GTC talk's ~90% maximum). Used for every GPU. The kinds
  state each layer's bytes themselves and stream them at the datasheet bandwidth, an
  element-wise kernel at ``thread_utilisation`` of it: one thread per output element, the GPU
  full at ``sms × threads_per_sm`` (CUDA C++ Programming Guide, "Technical Specifications per
  Compute Capability").
* **A kernel's fixed cost** (``kernel_cost_s``, the kinds only): its launch, ``KERNEL_LAUNCH_S``
  = 5 µs, as measured on Linux and reported on NVIDIA's developer forum ("Performance of
  launching kernels", forums.developer.nvidia.com/t/performance-of-lauching-kernels/32844; the
  forum's "Cost of launching a kernel function", t/18347, recalls ~4 µs from Volkov & Demmel's
  SC08 paper), a host-side cost the same on every GPU, added and not overlapped (an upper bound
  on what launches cost a step whose kernels could hide them; PyTorch's own per-operator host
  overhead is larger and not modelled), plus ``KERNEL_FLOOR_CYCLES`` = 12,000
  cycles at the SMs' clock: what a small kernel spends starting, filling its pipeline and
  draining. No datasheet gives it: it is the one constant fitted to measurements
  (``apportion.perf.kinds.fit_kernel_floor`` on Gavel's k80/p100/v100 ratios;
  ``benchmarks/accuracy/perf_kinds.py`` refits it per fold without the GPU it predicts).

Two kernel families of the explicit (non-flash) attention stream at less than η_mem, and for
them there is a published measurement of exactly the kernels Megatron-LM runs: Dao et al.,
"FlashAttention" (NeurIPS 2022, arXiv 2205.14135), Appendix E.6, Tables 11, 14, 17 and 20,
time Megatron-LM's attention (``baddbmm`` for QKᵀ, the fused scale-mask-softmax, PyTorch
dropout, ``bmm`` for the scores·V, and the backward of all of them) on one A100-SXM4-40GB
(1,555 GB/s), fp16, batch 16, 8 heads of 64, sequence 2,048, forward + backward:

* with masking, no dropout: 12.39 ms (no masking: 13.21 ms). This model, pricing the six
  batched GEMMs by ``gemm_time`` and the softmax at 2e and 3e bytes per score (forward,
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

from apportion.perf.accelerators import Accelerator, get_accelerator

MEMORY_EFFICIENCY = 0.90
# Megatron-LM's explicit attention core (batched GEMMs with k = head size, fused softmax) and the
# dropout on its s × s probabilities, measured by Dao et al. 2022 (see the module docstring).
ATTENTION_CORE_EFFICIENCY = 0.634
DROPOUT_EFFICIENCY = 0.831

KERNEL_LAUNCH_S = 5e-6
# a kernel's fixed cost on the GPU, in clock cycles, on top of its launch; fitted on Gavel's
# measured k80, p100 and v100 ratios (apportion.perf.kinds.fit_kernel_floor; docs/perf_kinds.md)
KERNEL_FLOOR_CYCLES = 12_000

# bytes per operand element; an fp8 product's bf16 output is counted at 1 byte too (its memory
# roof slightly optimistic)
BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class Gemm:
    """``batch`` matrix products C[m, n] = A[m, k] · B[k, n]; ``name`` says which (``qkv``, ``fc1.dgrad``)."""

    m: int
    n: int
    k: int
    batch: int = 1
    name: str = ""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def backward(self) -> tuple["Gemm", "Gemm"]:
        """The two backward GEMMs: input gradient dA = dC·Bᵀ (m × k, reducing over n) and weight
        (or second operand's) gradient dB = Aᵀ·dC (k × n, reducing over m)."""
        return (Gemm(self.m, self.k, self.n, self.batch, self.name + ".dgrad"),
                Gemm(self.k, self.n, self.m, self.batch, self.name + ".wgrad"))


@dataclass(frozen=True)
class TileSet:
    """The output tiles a GEMM library picks among, and how it fills the SMs (module docstring)."""

    tiles: tuple[tuple[int, int], ...]
    rate_exponent: float = 0.0  # a tile of area A runs at (A / 128²) ** rate_exponent a 128 × 128 tile's rate
    split_k_min_depth: int = 0  # reduction slices spread over idle SMs are no thinner than this; 0: no split-K


REFERENCE_TILE = (128, 128)
TENSOR_CORE_TILES = TileSet(((256, 128), (128, 256), (128, 128)))
CUDA_CORE_TILES = TileSet(((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32), (16, 128),
                           (128, 16)), rate_exponent=0.25, split_k_min_depth=128)


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    bound: str  # "compute" or "memory"


def roofline(flops: float, nbytes: float, flop_rate: float, bandwidth: float) -> KernelTime:
    """Seconds for a kernel doing ``flops`` at ``flop_rate`` FLOP/s and moving ``nbytes`` at
    ``bandwidth`` bytes/s, whichever takes longer, and which that was."""
    compute = flops / flop_rate if flops else 0.0
    memory = nbytes / bandwidth if nbytes else 0.0
    return KernelTime(compute, "compute") if compute >= memory else KernelTime(memory, "memory")


def gemm_utilisation(gemm: Gemm, acc: Accelerator, tiles: TileSet = CUDA_CORE_TILES) -> float:
    """Fraction of the compute rate ``gemm`` reaches on ``acc`` when cut into ``tiles``: over the
    set's tile shapes, the best of (useful share of its tiles) × (SMs busy over its waves) ×
    (the tile's rate), the reduction split over otherwise idle SMs where the set splits K."""
    return _utilisation(gemm.m, gemm.n, gemm.k, gemm.batch, acc.sms, tiles)


@lru_cache(maxsize=65536)
def _utilisation(m: int, n: int, k: int, batch: int, sms: int, tiles: TileSet) -> float:
    return max(_tiled_utilisation(m, n, k, batch, sms, tile, tiles) for tile in tiles.tiles)


def _tiled_utilisation(m: int, n: int, k: int, batch: int, sms: int, tile: tuple[int, int],
                       tiles: TileSet) -> float:
    rows, cols = ceil(m / tile[0]), ceil(n / tile[1])
    count = batch * rows * cols
    useful = (m * n) / (rows * tile[0] * cols * tile[1])
    rate = (tile[0] * tile[1] / (REFERENCE_TILE[0] * REFERENCE_TILE[1])) ** tiles.rate_exponent
    blocks = count
    if tiles.split_k_min_depth and count < sms:  # split-K: spread the reduction over otherwise idle SMs
        splits = min(sms // count, max(1, k // tiles.split_k_min_depth))
        blocks = count * max(1, splits)
    waves = ceil(blocks / sms)
    return useful * rate * blocks / (waves * sms)


def gemm_time(gemm: Gemm, acc: Accelerator, precision: str = "bf16",
              memory_efficiency: float = MEMORY_EFFICIENCY) -> KernelTime:
    """Seconds for ``gemm`` at ``precision`` on ``acc`` as cuBLAS runs it on tensor cores: its
    FLOPs at the GPU's GEMM ceiling × its ``TENSOR_CORE_TILES`` utilisation, or its operands and
    result through HBM at ``memory_efficiency`` of the datasheet bandwidth
    (``ATTENTION_CORE_EFFICIENCY`` for the attention core's batched GEMMs)."""
    m, n, k, batch = gemm.m, gemm.n, gemm.k, gemm.batch
    if min(m, n, k, batch) <= 0:
        return KernelTime(0.0, "compute")
    rate = acc.gemm_ceiling * acc.peak(precision) * gemm_utilisation(gemm, acc, TENSOR_CORE_TILES)
    nbytes = BYTES.get(precision, 2) * batch * (m * k + k * n + m * n)
    return roofline(gemm.flops, nbytes, rate, memory_efficiency * acc.memory_bandwidth)


def gemm_efficiency(gemm: Gemm, acc: Accelerator, precision: str = "bf16") -> float:
    """Achieved fraction of the datasheet peak for this shape (≤ the GPU's ceiling)."""
    t = gemm_time(gemm, acc, precision).seconds
    return gemm.flops / t / acc.peak(precision) if t > 0 else 0.0


def memory_time(nbytes: float, acc: Accelerator, efficiency: float = MEMORY_EFFICIENCY) -> float:
    """Seconds for a bandwidth-bound kernel that moves ``nbytes`` through HBM at ``efficiency``."""
    return nbytes / (efficiency * acc.memory_bandwidth)


def sustained_peak(acc: Accelerator, precision: str, sustained: bool = True) -> float:
    """FLOP/s the GPU's units sustain at ``precision``: the datasheet peak, and for FP32 on CUDA
    cores the fraction of it one clock's issue fills at the clock the GPU holds under load.

    Habitat (Yu et al., ATC 2021) scales a compute-bound kernel by SMs × clock, taking every SM to do
    the same work per clock; that holds from Pascal on (64 or 128 FP32 lanes per SM, filled by one
    instruction per scheduler per clock), not for Kepler, whose 192 lanes per SMX need two
    independent instructions per warp from each of its four schedulers. And the K80's two dies
    share a 300 W board: its datasheet gives 5.6 TFLOP/s at the 562 MHz base clock beside the 8.73
    of its boost, which autoboost reaches only with power to spare. Every other GPU is taken at
    its datasheet (boost) peak (``sustained=False``: every GPU, the K80 too).
    """
    peak = acc.peak(precision)
    if sustained and precision == "fp32":
        peak *= acc.fp32_issue_fraction * acc.sustained_clock_fraction
    return peak


def thread_utilisation(elements: float, acc: Accelerator) -> float:
    """Fraction of the GPU's resident-thread slots an element-per-thread kernel fills (1 on a
    device without SMs' threads, the CPU)."""
    if not acc.threads_per_sm or elements <= 0:
        return 1.0
    return min(1.0, elements / (acc.sms * acc.threads_per_sm))


def kernel_cost_s(gpu: str | Accelerator, sustained: bool = True, floor_cycles: float | None = None) -> float:
    """Fixed seconds per kernel on ``gpu``: its launch (host side, the same everywhere) plus
    ``floor_cycles`` (default ``KERNEL_FLOOR_CYCLES``) at the SMs' clock, the part of a small
    kernel's time that a faster clock shortens and more SMs or bandwidth do not."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    cycles = KERNEL_FLOOR_CYCLES if floor_cycles is None else floor_cycles
    if not acc.boost_clock_mhz or not cycles:
        return KERNEL_LAUNCH_S
    return KERNEL_LAUNCH_S + cycles / acc.clock_hz(sustained)
