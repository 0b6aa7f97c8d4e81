"""A per-layer roofline for one training step of a network described layer by layer.

Every layer says how much work its forward pass does: FLOPs (2 per multiply-add), bytes it
moves to and from GPU memory (weights + input and output activations at the step's precision
and batch), how many kernels it launches, and how that work splits into parallel pieces (the
output tiles of a matrix product, or one thread per element). A training step is

    forward             each layer as described
    backward            2 × the forward FLOPs and bytes of every layer gradients flow through:
                        a GEMM-like layer runs two products of its forward's size (the input's
                        gradient and the weights'), each at its own utilisation; a layer whose
                        input needs no gradient (the first convolution, an embedding) runs
                        only the weights' half; kernels 2 × (1 × for the half case and for
                        element-wise layers without weights)
    optimizer update    a few memory-bound sweeps over parameters, gradients and optimizer
                        state, as PyTorch 1.x's ``torch.optim`` wrote them (``OPTIMIZERS``)

and each piece of work costs

    time = max(FLOPs / (peak × utilisation), bytes / (bandwidth × utilisation))
           + kernels × (launch + floor cycles / clock)

with the accelerator's datasheet peak at the precision asked for and its datasheet memory
bandwidth (``apportion.perf.accelerators``), and a fixed cost per kernel: its launch and a
floor of cycles at the SMs' clock.

Constants and where they come from:

- ``KERNEL_LAUNCH_S`` = 5 µs per kernel: the launch of an empty kernel, as measured on Linux
  and reported on NVIDIA's developer forum ("Performance of launching kernels",
  forums.developer.nvidia.com/t/performance-of-lauching-kernels/32844: about 5 µs); the same
  forum's "Cost of launching a kernel function" thread (t/18347) recalls ~4 µs from Volkov &
  Demmel's SC08 paper. It is a host-side cost, the same on every GPU; added, not overlapped,
  so it is an upper bound on what launches cost a step whose kernels are long enough to hide
  them. PyTorch's own per-operator host overhead (Python, dispatch) is larger and not modelled.
- ``KERNEL_FLOOR_CYCLES`` = 12,000 cycles per kernel at the SMs' clock (``SMSpec.clock_hz``):
  what a small kernel spends starting, filling its pipeline and draining, which a faster clock
  shortens and more SMs or bandwidth do not. No datasheet gives it: it is the one constant
  fitted to measurements (``apportion.perf.kinds.fit_kernel_floor`` on Gavel's k80/p100/v100
  ratios; ``benchmarks/perf_kinds.py`` refits it per fold without the GPU it predicts).
- Utilisation of a matrix product (convolutions run as implicit GEMMs): its M × N output is
  cut into tiles, one thread block each, the best of ``GEMM_TILES`` (CUTLASS's CUDA-core SGEMM
  tiles from 128 × 128 down, 256 threads per block for the largest:
  github.com/NVIDIA/cutlass/issues/74; NVIDIA "Matrix Multiplication Background User's Guide",
  DU-09799-001, §2.3 typical cuBLAS tiles), one block per SM at a time (assumed); a smaller tile
  runs at (area / 128²) ** ``TILE_RATE_EXPONENT`` the rate (assumed) and a partial tile at the
  edge computes zeros. Blocks run in waves of ``sms`` blocks; utilisation = useful share ×
  blocks / (waves × sms) × tile rate — NVIDIA's "wave quantization" (same guide, §3.2). When the output has fewer
  tiles than the GPU has SMs, the K dimension is split across blocks (split-K, as cuBLAS and
  CUTLASS do) into at most ``sms // tiles`` slices of at least ``SPLIT_K_MIN_DEPTH`` = 128 (an
  assumption: one tile edge). Work too small to fill the SMs thus runs at a proportionally
  lower rate, and the same layer fills a 13-SM K80 die sooner than a 132-SM H100.
- Utilisation of an element-wise kernel (and of the memory term of any non-GEMM layer): one
  thread per output element; the GPU is full at ``sms × max resident threads per SM`` threads
  (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability");
  utilisation = min(1, elements / that).
- SM counts and resident threads per SM: ``SM_TABLE``, each with its source.

Apart from the kernel floor, nothing is fitted to a measured step time. What it leaves out: host-side work (Python, the data
loader, ``.item()`` synchronisations beyond their kernels), library algorithm choice (cuDNN's
Winograd/FFT convolutions do fewer multiplies than counted here), caches (every byte counted
goes to DRAM), clocks below the datasheet boost, and overlap of launches with execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from apportion.perf.accelerators import Accelerator, get_accelerator

KERNEL_LAUNCH_S = 5e-6
GEMM_TILE = (128, 128)
# thread-block tiles a GEMM library picks from (CUTLASS's SGEMM configurations, 128 × 128 down to
# 32 × 32, and the 16-wide tiles of its small-M/N kernels; assumed to be the set cuBLAS chooses
# among) and how fast a smaller tile runs per SM: (area / 128²) ** TILE_RATE_EXPONENT (assumed)
GEMM_TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32), (16, 128), (128, 16))
TILE_RATE_EXPONENT = 0.25
SPLIT_K_MIN_DEPTH = 128
# a kernel's fixed cost on the GPU, in clock cycles, on top of its launch; fitted on Gavel's
# measured k80, p100 and v100 ratios (apportion.perf.kinds.fit_kernel_floor; docs/perf_kinds.md)
KERNEL_FLOOR_CYCLES = 12_000

BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class SMSpec:
    sms: int
    max_threads_per_sm: int
    source: str
    # what the FP32 units sustain in a training step, as fractions of the datasheet peak (see
    # ``sustained_peak``): the lanes one clock's issue can fill, and the clock under full load
    boost_clock_mhz: float = 0.0  # datasheet boost clock: a kernel's fixed cycles run at it
    fp32_issue_fraction: float = 1.0
    sustained_clock_fraction: float = 1.0

    def clock_hz(self, sustained: bool = True) -> float:
        """The clock the SMs hold in a training step (the K80: its base clock, see ``sustained_peak``)."""
        return self.boost_clock_mhz * 1e6 * (self.sustained_clock_fraction if sustained else 1.0)


_CUDA_GUIDE = ("CUDA C++ Programming Guide, Technical Specifications per Compute Capability: "
               "maximum resident threads per SM")
SM_TABLE: dict[str, SMSpec] = {
    "k80": SMSpec(13, 2048, "NVIDIA Tesla K80 datasheet: 4,992 CUDA cores per two-GPU board = 2,496 "
                            "per GK210; Kepler GK110/GK210 whitepaper: 192 cores per SMX -> 13 SMX; "
                            f"compute capability 3.7: 2,048 threads ({_CUDA_GUIDE}); four warp schedulers "
                            "per SMX issue 4 × 32 = 128 lanes a clock without dual issue (whitepaper: two "
                            "independent instructions per warp are needed to fill all 192); the K80 datasheet "
                            "rates the board 8.73 TFLOP/s at its 875 MHz boost and 5.6 at its 562 MHz base clock",
                  boost_clock_mhz=875, fp32_issue_fraction=128 / 192, sustained_clock_fraction=562 / 875),
    "p100": SMSpec(56, 2048, "NVIDIA Tesla P100 whitepaper: 56 SMs (3,584 FP32 cores, 64 per SM); "
                             f"compute capability 6.0: 2,048 threads ({_CUDA_GUIDE}); P100 PCIe datasheet: "
                             "1,303 MHz boost", boost_clock_mhz=1303),
    "v100": SMSpec(80, 2048, "NVIDIA Tesla V100 whitepaper: 80 SMs (5,120 FP32 cores), SXM2 boost 1,530 MHz; "
                             f"compute capability 7.0: 2,048 threads ({_CUDA_GUIDE})", boost_clock_mhz=1530),
    "t4": SMSpec(40, 1024, "NVIDIA T4 datasheet: 2,560 CUDA cores; Turing whitepaper: 64 FP32 cores "
                           f"per SM -> 40 SMs, 1,590 MHz boost; compute capability 7.5: 1,024 threads "
                           f"({_CUDA_GUIDE})", boost_clock_mhz=1590),
    "a100-40gb": SMSpec(108, 2048, "NVIDIA A100 whitepaper: 108 SMs (6,912 FP32 cores), 1,410 MHz boost; "
                                   f"compute capability 8.0: 2,048 threads ({_CUDA_GUIDE})", boost_clock_mhz=1410),
    "a100-80gb": SMSpec(108, 2048, "NVIDIA A100 whitepaper: 108 SMs (6,912 FP32 cores), 1,410 MHz boost; "
                                   f"compute capability 8.0: 2,048 threads ({_CUDA_GUIDE})", boost_clock_mhz=1410),
    "h100": SMSpec(132, 2048, "NVIDIA H100 whitepaper: H100 SXM5 132 SMs (16,896 FP32 cores), 1,980 MHz "
                              f"boost; compute capability 9.0: 2,048 threads ({_CUDA_GUIDE})",
                   boost_clock_mhz=1980),
    "h200": SMSpec(132, 2048, "assumed the H100 SXM5's 132 SMs and 1,980 MHz boost: the H200 datasheet gives "
                              f"the same compute figures; compute capability 9.0: 2,048 threads ({_CUDA_GUIDE})",
                   boost_clock_mhz=1980),
}


@dataclass(frozen=True)
class Gemm:
    """A (batched) matrix product: ``batch`` products of an M × K by a K × N matrix."""

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class Layer:
    """One layer's forward pass: work, traffic, launches, and how the work splits."""

    name: str
    flops: float  # forward FLOPs, 2 per multiply-add
    bytes: float  # forward bytes to and from GPU memory
    kernels: int = 1  # forward kernel launches
    gemm: Gemm | None = None  # the product it runs as, if it is GEMM-like
    elements: float = 0.0  # output elements: the parallel work of a non-GEMM kernel
    weighted: bool = False  # has trainable weights (a weight-gradient product in backward)
    input_grad: bool = True  # backward computes the gradient of its input
    backward: bool = True  # gradients flow through it at all


@dataclass(frozen=True)
class OptimizerCost:
    """Kernels per parameter tensor and element reads + writes per parameter, for one update."""

    name: str
    kernels_per_tensor: int
    accesses_per_element: int
    source: str


_TORCH_OPTIM = "PyTorch 1.x torch/optim ({}): {}; plus zero_grad's grad.zero_() (1 kernel, 1 write)"
OPTIMIZERS: dict[str, OptimizerCost] = {
    "sgd": OptimizerCost("sgd", 2, 4, _TORCH_OPTIM.format("sgd.py", "p.add_(-lr, d_p): 1 kernel, 3 accesses")),
    "sgd_clip": OptimizerCost(
        "sgd_clip", 4, 7,
        _TORCH_OPTIM.format("sgd.py, nn/utils/clip_grad.py", "clip_grad_norm_: grad.norm() and grad.mul_"
                            "(clip_coef) per tensor (2 kernels, 3 accesses); p.add_(-lr, d_p) (1, 3)")),
    "sgd_momentum_wd": OptimizerCost(
        "sgd_momentum_wd", 5, 12,
        _TORCH_OPTIM.format("sgd.py", "d_p.add(wd, p) (3 accesses), buf.mul_(m) (2), buf.add_(d_p) (3), "
                            "p.add_(-lr, buf) (3): 4 kernels, 11 accesses")),
    "adam": OptimizerCost(
        "adam", 8, 19,
        _TORCH_OPTIM.format("adam.py", "exp_avg.mul_().add_() (2+3), exp_avg_sq.mul_().addcmul_() (2+3), "
                            "exp_avg_sq.sqrt().add_(eps) (2+2), p.addcdiv_() (4): 7 kernels, 18 accesses")),
    "adam_wd": OptimizerCost(
        "adam_wd", 9, 22,
        _TORCH_OPTIM.format("adam.py", "as adam plus grad.add(wd, p) (1 kernel, 3 accesses)")),
}


@dataclass(frozen=True)
class ParamGroup:
    """Parameters one optimizer updates: elements and tensors (kernels go per tensor)."""

    elements: int
    tensors: int
    optimizer: str  # a key of OPTIMIZERS, or "none" (updated off the GPU, e.g. on the host)


@dataclass(frozen=True)
class TrainingStep:
    """Everything one training step runs on one GPU."""

    name: str
    layers: tuple[Layer, ...]
    params: tuple[ParamGroup, ...] = ()
    extra_kernels: int = 0  # small bookkeeping kernels (loss scalars, metrics, data slicing)
    precision: str = "fp32"

    @property
    def forward_flops(self) -> float:
        return sum(layer.flops for layer in self.layers)


@dataclass(frozen=True)
class StepTime:
    """A step's predicted time on one accelerator, split by phase (seconds)."""

    forward: float
    backward: float
    optimizer: float
    launch: float  # the fixed per-kernel part (launch + floor), already included in the three above
    kernels: int

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.optimizer


# --- utilisation -------------------------------------------------------------------------------


def sustained_peak(acc: Accelerator, precision: str, spec: SMSpec | None, sustained: bool = True) -> float:
    """FLOP/s the GPU's units sustain at ``precision``: the datasheet peak, and for FP32 on CUDA
    cores the fraction of it one clock's issue fills at the clock the GPU holds under load.

    Habitat (Yu et al., ATC 2021) scales a compute-bound kernel by SMs × clock, taking every SM to do
    the same work per clock; that holds from Pascal on (64 or 128 FP32 lanes per SM, filled by one
    instruction per scheduler per clock), not for Kepler, whose 192 lanes per SMX need two
    independent instructions per warp from each of its four schedulers. And the K80's two dies
    share a 300 W board: its datasheet gives 5.6 TFLOP/s at the 562 MHz base clock beside the 8.73
    of its boost, which autoboost reaches only with power to spare. Every other GPU is taken at
    its datasheet (boost) peak.
    """
    peak = acc.peak(precision)
    if sustained and spec is not None and precision == "fp32":
        peak *= spec.fp32_issue_fraction * spec.sustained_clock_fraction
    return peak


def sm_spec(gpu: str | Accelerator) -> SMSpec | None:
    """SM count and resident threads of ``gpu``; None for a device without SMs (the CPU)."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    return SM_TABLE.get(acc.name)


def gemm_utilisation(gemm: Gemm, spec: SMSpec | None) -> float:
    """Fraction of the GPU's peak a (batched) GEMM reaches: over the tile shapes of ``GEMM_TILES``,
    the best of (useful share of its tiles) × (SMs busy over its waves) × (the tile's rate).

    A small output cut into 128 × 128 tiles leaves most SMs idle; smaller tiles fill them but run
    fewer FLOPs per clock (less reuse of what each block loads), and a partial tile at an edge
    computes zeros. When even the smallest tiling leaves SMs idle, the reduction is split
    across them (split-K) into at most ``sms // tiles`` slices no thinner than
    ``SPLIT_K_MIN_DEPTH``.
    """
    if spec is None:
        return 1.0
    return max(_tiled_utilisation(gemm, spec, tile) for tile in GEMM_TILES)


def _tiled_utilisation(gemm: Gemm, spec: SMSpec, tile: tuple[int, int]) -> float:
    rows, cols = math.ceil(gemm.m / tile[0]), math.ceil(gemm.n / tile[1])
    tiles = gemm.batch * rows * cols
    useful = (gemm.m * gemm.n) / (rows * tile[0] * cols * tile[1])
    rate = (tile[0] * tile[1] / (GEMM_TILE[0] * GEMM_TILE[1])) ** TILE_RATE_EXPONENT
    blocks = tiles
    if tiles < spec.sms:  # split-K: spread the reduction over otherwise idle SMs
        splits = min(spec.sms // tiles, max(1, gemm.k // SPLIT_K_MIN_DEPTH))
        blocks = tiles * max(1, splits)
    waves = math.ceil(blocks / spec.sms)
    return useful * rate * blocks / (waves * spec.sms)


def thread_utilisation(elements: float, spec: SMSpec | None) -> float:
    """Fraction of the GPU's resident-thread slots an element-per-thread kernel fills."""
    if spec is None or elements <= 0:
        return 1.0
    return min(1.0, elements / (spec.sms * spec.max_threads_per_sm))


# --- time --------------------------------------------------------------------------------------


def _roofline(flops: float, nbytes: float, peak: float, bandwidth: float, u_compute: float,
              u_memory: float) -> float:
    return max(flops / (peak * u_compute) if flops else 0.0,
               nbytes / (bandwidth * u_memory) if nbytes else 0.0)


def kernel_cost_s(gpu: str | Accelerator, sustained: bool = True, floor_cycles: float | None = None) -> float:
    """Fixed seconds per kernel on ``gpu``: its launch (host side, the same everywhere) plus
    ``floor_cycles`` (default ``KERNEL_FLOOR_CYCLES``) at the SMs' clock, the part of a small
    kernel's time that a faster clock shortens and more SMs or bandwidth do not."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    spec = sm_spec(acc)
    cycles = KERNEL_FLOOR_CYCLES if floor_cycles is None else floor_cycles
    if spec is None or not spec.boost_clock_mhz or not cycles:
        return KERNEL_LAUNCH_S
    return KERNEL_LAUNCH_S + cycles / spec.clock_hz(sustained)


def layer_forward_time(layer: Layer, gpu: str | Accelerator, precision: str = "fp32", sustained: bool = True,
                       floor_cycles: float | None = None) -> float:
    """Seconds for ``layer``'s forward pass on ``gpu``, fixed per-kernel costs included."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    spec = sm_spec(acc)
    peak, bw = sustained_peak(acc, precision, spec, sustained), acc.memory_bandwidth
    if layer.gemm is not None:
        u_c, u_m = gemm_utilisation(layer.gemm, spec), 1.0
    else:
        u_c = u_m = thread_utilisation(layer.elements, spec)
    return (_roofline(layer.flops, layer.bytes, peak, bw, u_c, u_m)
            + layer.kernels * kernel_cost_s(acc, sustained, floor_cycles))


def backward_kernels(layer: Layer) -> int:
    """Kernels ``layer``'s backward launches: one per product (or per kernel of a weightless
    element-wise layer); a layer with weights and an input gradient launches twice its forward."""
    if not layer.backward:
        return 0
    if layer.gemm is not None:
        return layer.kernels * (2 if layer.input_grad else 1)
    return 2 * layer.kernels if (layer.weighted and layer.input_grad) else layer.kernels


def layer_backward_time(layer: Layer, gpu: str | Accelerator, precision: str = "fp32", sustained: bool = True,
                        floor_cycles: float | None = None) -> float:
    """Seconds for ``layer``'s backward pass on ``gpu``, fixed per-kernel costs included.

    A GEMM-like layer runs two products of its forward's size: the input's gradient
    (dX = dY·Wᵀ, an M × K output reducing over N) and the weights' (dW = Xᵀ·dY, K × N reducing
    over M; for a product of two activations, the second operand's gradient), each with the
    forward's FLOPs and bytes and its own utilisation. A layer whose input needs no gradient
    (the first convolution, an embedding) runs only the second. Any other layer costs twice
    its forward FLOPs and bytes (once if its input needs no gradient).
    """
    if not layer.backward:
        return 0.0
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    spec = sm_spec(acc)
    peak, bw = sustained_peak(acc, precision, spec, sustained), acc.memory_bandwidth
    launches = backward_kernels(layer) * kernel_cost_s(acc, sustained, floor_cycles)
    if layer.gemm is None:
        factor = 2.0 if layer.input_grad else 1.0
        u = thread_utilisation(layer.elements, spec)
        return _roofline(factor * layer.flops, factor * layer.bytes, peak, bw, u, u) + launches
    g = layer.gemm
    products = [Gemm(g.k, g.n, g.m, g.batch)]  # weights' (or second operand's) gradient
    if layer.input_grad:
        products.append(Gemm(g.m, g.k, g.n, g.batch))
    return sum(_roofline(layer.flops, layer.bytes, peak, bw, gemm_utilisation(p, spec), 1.0)
               for p in products) + launches


def optimizer_time(group: ParamGroup, gpu: str | Accelerator, precision: str = "fp32", sustained: bool = True,
                   floor_cycles: float | None = None) -> float:
    """Seconds for one optimizer update (and zero_grad) of ``group`` on ``gpu``."""
    if group.optimizer == "none" or group.elements == 0:
        return 0.0
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    cost = OPTIMIZERS[group.optimizer]
    per_tensor = group.elements / max(1, group.tensors)
    u = thread_utilisation(per_tensor, sm_spec(acc))
    nbytes = cost.accesses_per_element * group.elements * 4  # optimizer state kept in fp32
    return (nbytes / (acc.memory_bandwidth * u)
            + cost.kernels_per_tensor * group.tensors * kernel_cost_s(acc, sustained, floor_cycles))


def step_time(step: TrainingStep, gpu: str | Accelerator, sustained: bool = True,
              floor_cycles: float | None = None) -> StepTime:
    """The predicted time of one training step of ``step`` on ``gpu``, by phase (``sustained=False``:
    at the datasheet peaks, as this model did before ``sustained_peak``; ``floor_cycles``: a
    kernel's fixed cycles, ``KERNEL_FLOOR_CYCLES`` unless given)."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    p, f = step.precision, floor_cycles
    forward = sum(layer_forward_time(layer, acc, p, sustained, f) for layer in step.layers)
    backward = sum(layer_backward_time(layer, acc, p, sustained, f) for layer in step.layers)
    optimizer = sum(optimizer_time(group, acc, p, sustained, f) for group in step.params)
    kernels = (sum(layer.kernels for layer in step.layers)
               + sum(backward_kernels(layer) for layer in step.layers)
               + sum(OPTIMIZERS[g.optimizer].kernels_per_tensor * g.tensors
                     for g in step.params if g.optimizer != "none")
               + step.extra_kernels)
    per_kernel = kernel_cost_s(acc, sustained, f)
    forward += step.extra_kernels * per_kernel
    return StepTime(forward, backward, optimizer, kernels * per_kernel, kernels)


# --- building networks -------------------------------------------------------------------------


@dataclass
class Net:
    """Collects a network's layers and parameters while its forward pass is described.

    A module used several times in one step (CycleGAN's generators, A3C's network over 20
    time steps) is named by ``module``: its layers are added each time, its parameters once.
    """

    name: str
    precision: str = "fp32"
    layers: list[Layer] = field(default_factory=list)
    params: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # module -> (elements, tensors, opt)
    optimizer: str = "sgd"
    extra_kernels: int = 0

    @property
    def b(self) -> int:
        return BYTES_PER_ELEMENT[self.precision]

    def param(self, module: str | None, elements: int, tensors: int) -> None:
        if module is not None and elements:
            self.params.setdefault(module, (elements, tensors, self.optimizer))

    def add(self, layer: Layer) -> None:
        self.layers.append(layer)

    # layers -------------------------------------------------------------------------------

    def conv2d(self, name: str, shape: tuple[int, int, int, int], cout: int, k: int, stride: int = 1,
               pad: int = 0, bias: bool = True, module: str | None = None, input_grad: bool = True,
               backward: bool = True) -> tuple[int, int, int, int]:
        """A k × k convolution of an (N, C, H, W) input; returns the output shape."""
        n, cin, h, w = shape
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        weights = cout * cin * k * k
        out = n * cout * ho * wo
        gemm = Gemm(n * ho * wo, cout, cin * k * k)
        self.add(Layer(name, gemm.flops + (out if bias else 0),
                       self.b * (weights + n * cin * h * w + out), 1 + bias, gemm, out, True,
                       input_grad, backward))
        self.param(module or name, weights + (cout if bias else 0), 1 + bias)
        return n, cout, ho, wo

    def linear(self, name: str, rows: int, fin: int, fout: int, bias: bool = True,
               module: str | None = None, backward: bool = True, input_grad: bool = True) -> None:
        """``rows`` vectors of ``fin`` features times an fin × fout matrix (+ bias)."""
        gemm = Gemm(rows, fout, fin)
        self.add(Layer(name, gemm.flops + (rows * fout if bias else 0),
                       self.b * (fin * fout + rows * fin + rows * fout), 1 + bias, gemm, rows * fout,
                       True, input_grad, backward))
        self.param(module or name, fin * fout + (fout if bias else 0), 1 + bias)

    def matmul(self, name: str, batch: int, m: int, n: int, k: int, backward: bool = True) -> None:
        """A batched product of two activations (attention scores, attention × values)."""
        gemm = Gemm(m, n, k, batch)
        self.add(Layer(name, gemm.flops, self.b * batch * (m * k + k * n + m * n), 1, gemm, batch * m * n,
                       False, True, backward))

    def elementwise(self, name: str, elements: float, reads: float = 1, writes: float = 1,
                    flops_per_element: float = 1, kernels: int = 1, params: int = 0,
                    param_tensors: int = 0, module: str | None = None, backward: bool = True) -> None:
        """A memory-bound kernel touching ``reads + writes`` values per output element."""
        self.add(Layer(name, flops_per_element * elements, self.b * (reads + writes) * elements, kernels,
                       None, elements, bool(params), True, backward))
        self.param(module or name, params, param_tensors)

    def batchnorm(self, name: str, shape: tuple[int, ...], module: str | None = None,
                  backward: bool = True) -> None:
        """Training-mode batch norm: a statistics pass and a normalising pass (read, read, write)."""
        elements = math.prod(shape)
        self.elementwise(name, elements, reads=2, writes=1, flops_per_element=8, params=2 * shape[1],
                         param_tensors=2, module=module or name, backward=backward)

    def instancenorm(self, name: str, shape: tuple[int, ...], backward: bool = True) -> None:
        """InstanceNorm2d without affine parameters: run as batch norm on a reshaped view."""
        self.elementwise(name, math.prod(shape), reads=2, writes=1, flops_per_element=8, kernels=2,
                         backward=backward)

    def relu(self, name: str, shape: tuple[int, ...], backward: bool = True) -> None:
        self.elementwise(name, math.prod(shape), backward=backward)

    def add_tensors(self, name: str, shape: tuple[int, ...], backward: bool = True) -> None:
        self.elementwise(name, math.prod(shape), reads=2, writes=1, backward=backward)

    def pool(self, name: str, shape: tuple[int, int, int, int], k: int, stride: int, pad: int = 0,
             backward: bool = True) -> tuple[int, int, int, int]:
        n, c, h, w = shape
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        out = n * c * ho * wo
        self.add(Layer(name, out * k * k, self.b * (n * c * h * w + out), 1, None, out, False, True, backward))
        return n, c, ho, wo

    def embedding(self, name: str, tokens: int, vocab: int, dim: int, module: str | None = None,
                  backward: bool = True) -> None:
        """A table lookup: gathers ``tokens`` rows (dense gradient over the whole table)."""
        self.add(Layer(name, 0, self.b * 2 * tokens * dim + 8 * tokens, 1, None, tokens * dim, True, False,
                       backward))
        self.param(module or name, vocab * dim, 1)

    def lstm_layer(self, name: str, steps: int, batch: int, fin: int, hidden: int,
                   module: str | None = None) -> None:
        """One cuDNN LSTM layer over ``steps`` time steps: one input product for all steps,
        then per step a recurrent product and a gate kernel (2 launches per step)."""
        gates = 4 * hidden
        self.add(Layer(f"{name}.input", 2.0 * steps * batch * fin * gates,
                       self.b * (fin * gates + steps * batch * (fin + gates)), 1,
                       Gemm(steps * batch, gates, fin), steps * batch * gates, True))
        per_step_bytes = self.b * (hidden * gates + batch * hidden + 2 * batch * gates + 4 * batch * hidden)
        self.add(Layer(f"{name}.recurrent", steps * (2.0 * batch * hidden * gates + 10 * batch * gates),
                       steps * per_step_bytes, 2 * steps, Gemm(batch, gates, hidden),
                       batch * gates, True))
        self.param(module or name, gates * (fin + hidden) + 2 * gates, 4)

    def softmax_cross_entropy(self, name: str, rows: int, classes: int) -> None:
        """log_softmax (reads the logits twice, writes once) and the NLL gather."""
        self.elementwise(f"{name}.log_softmax", rows * classes, reads=2, writes=1, flops_per_element=4)
        self.elementwise(f"{name}.nll", rows, reads=1, writes=0)

    def build(self) -> TrainingStep:
        groups: dict[str, list[int]] = {}
        for elements, tensors, opt in self.params.values():
            acc = groups.setdefault(opt, [0, 0])
            acc[0] += elements
            acc[1] += tensors
        return TrainingStep(self.name, tuple(self.layers),
                            tuple(ParamGroup(e, t, o) for o, (e, t) in groups.items()),
                            self.extra_kernels, self.precision)
