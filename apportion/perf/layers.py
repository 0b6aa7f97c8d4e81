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

and each piece of work is priced by the roofline of ``apportion.perf.roofline``, the one the
transformer step model uses, from the accelerator's catalog entry alone::

    time = max(FLOPs / (sustained peak × utilisation), bytes / (bandwidth × utilisation))
           + kernels × (launch + floor cycles / clock)

A GEMM-like layer (convolutions run as implicit GEMMs) reaches ``roofline.gemm_utilisation``
of the peak over ``CUDA_CORE_TILES`` (the FP32 SGEMM tiles, with split-K) and streams its bytes
at the full datasheet bandwidth; an element-wise layer reaches ``roofline.thread_utilisation``
of both. The peak is ``roofline.sustained_peak`` (the K80's FP32 issue limit and base clock),
and every kernel costs ``roofline.kernel_cost_s``: its launch and the one fitted constant, a
floor of cycles at the SMs' clock (``KERNEL_FLOOR_CYCLES``). Where each figure comes from is in
that module's docstring and the catalog's sources.

Apart from the kernel floor, nothing is fitted to a measured step time. What it leaves out: host-side work (Python, the data
loader, ``.item()`` synchronisations beyond their kernels), library algorithm choice (cuDNN's
Winograd/FFT convolutions do fewer multiplies than counted here), caches (every byte counted
goes to DRAM), clocks below the datasheet boost, and overlap of launches with execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from apportion.perf.accelerators import Accelerator, get_accelerator
from apportion.perf.roofline import (
    BYTES,
    CUDA_CORE_TILES,
    Gemm,
    gemm_utilisation,
    kernel_cost_s,
    roofline,
    sustained_peak,
    thread_utilisation,
)


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


# --- time --------------------------------------------------------------------------------------


def _time(flops: float, nbytes: float, peak: float, bandwidth: float, u_compute: float, u_memory: float) -> float:
    return roofline(flops, nbytes, peak * u_compute, bandwidth * u_memory).seconds


def layer_forward_time(layer: Layer, gpu: str | Accelerator, precision: str = "fp32", sustained: bool = True,
                       floor_cycles: float | None = None) -> float:
    """Seconds for ``layer``'s forward pass on ``gpu``, fixed per-kernel costs included."""
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    peak, bw = sustained_peak(acc, precision, sustained), acc.memory_bandwidth
    if layer.gemm is not None:
        u_c, u_m = gemm_utilisation(layer.gemm, acc, CUDA_CORE_TILES), 1.0
    else:
        u_c = u_m = thread_utilisation(layer.elements, acc)
    return (_time(layer.flops, layer.bytes, peak, bw, u_c, u_m)
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
    peak, bw = sustained_peak(acc, precision, sustained), acc.memory_bandwidth
    launches = backward_kernels(layer) * kernel_cost_s(acc, sustained, floor_cycles)
    if layer.gemm is None:
        factor = 2.0 if layer.input_grad else 1.0
        u = thread_utilisation(layer.elements, acc)
        return _time(factor * layer.flops, factor * layer.bytes, peak, bw, u, u) + launches
    input_grad, weight_grad = layer.gemm.backward()
    products = [weight_grad, input_grad] if layer.input_grad else [weight_grad]
    return sum(_time(layer.flops, layer.bytes, peak, bw, gemm_utilisation(p, acc, CUDA_CORE_TILES), 1.0)
               for p in products) + launches


def optimizer_time(group: ParamGroup, gpu: str | Accelerator, precision: str = "fp32", sustained: bool = True,
                   floor_cycles: float | None = None) -> float:
    """Seconds for one optimizer update (and zero_grad) of ``group`` on ``gpu``."""
    if group.optimizer == "none" or group.elements == 0:
        return 0.0
    acc = gpu if isinstance(gpu, Accelerator) else get_accelerator(gpu)
    cost = OPTIMIZERS[group.optimizer]
    per_tensor = group.elements / max(1, group.tensors)
    u = thread_utilisation(per_tensor, acc)
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
        return BYTES[self.precision]

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
