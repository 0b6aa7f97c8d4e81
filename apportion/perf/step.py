"""Predict one training iteration's time and per-GPU memory for a transformer, a layout and a GPU.

The time of an iteration, on the slowest pipeline stage::

    T = m·T_mb,max + (p−1)/v · T_mb,mean          pipeline: steady state plus bubble
      + 2·v·m·T_p2p                                 stage-boundary sends (fwd activation, bwd gradient)
      + T_dp,exposed + T_embedding-sync              data-parallel gradient reduction (ZeRO gathers)
      + T_grad-accumulation + T_optimizer (+ T_offload)

``T_mb`` is one micro-batch's forward and backward over a GPU's layers: the sum of its
kernels, each timed by the roofline of :mod:`apportion.perf.roofline` (GEMMs by shape; LayerNorm,
softmax, dropout, GeLU, residual adds and the loss as memory-bound kernels whose bytes are
counted below), plus the tensor-parallel all-reduces (two in each forward and two in each
backward, Megatron-LM's f and g operators; sequence parallelism replaces each by an all-gather
and a reduce-scatter of the same total volume). Full recomputation runs the forward again
inside the backward; selective recomputation reruns only the attention core (QKᵀ, softmax,
dropout, scores·V). The element-wise byte counts follow the kernels Megatron-LM ran in 2021
(fused causal scale-mask-softmax, fused bias-GeLU, fused bias-dropout-add, its fused LayerNorm)
and are a derivation from their source, not a measurement: see docs/perf.md. They stream at
η_mem = 0.90 of the datasheet bandwidth, except the explicit attention core (the batched QKᵀ and
scores·V GEMMs and the softmax) and the dropout on its s × s probabilities, which run at the
efficiencies Dao et al. 2022 measured for Megatron-LM's attention on an A100
(:data:`~apportion.perf.roofline.ATTENTION_CORE_EFFICIENCY`, :data:`~apportion.perf.roofline.DROPOUT_EFFICIENCY`).

Data-parallel reduction overlaps with the last micro-batch's backward when the layout says so
(PyTorch DDP-style buckets), except one layer's bucket, which can only start after that layer's
gradients exist; Megatron-LM's 2021 "local" DDP reduced after the whole backward
(``overlap_grad_reduce=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from apportion.perf.accelerators import ACCELERATORS, Accelerator, get_accelerator
from apportion.perf.roofline import (
    ATTENTION_CORE_EFFICIENCY,
    BYTES,
    DROPOUT_EFFICIENCY,
    MEMORY_EFFICIENCY,
    gemm_time,
    memory_time,
)
from apportion.perf.memory import (
    GB,
    MemoryBreakdown,
    ModelStates,
    in_flight_microbatches,
    layer_activation_bytes,
    layer_working_bytes,
    model_state_bytes,
    state_bytes_per_param,
)
from apportion.perf.parallel import (
    DP_INTER_EFFICIENCY,
    Layout,
    allgather_time,
    allreduce_time,
    alltoall_time,
    ep_group,
    expert_dp_group,
    bubble_fraction,
    check_layout,
    even_stage_layers,
    dp_group,
    Group,
    p2p_time,
    tp_group,
)
from apportion.perf.software import MEGATRON_LM, SoftwareProfile
from apportion.perf.transformer import (
    TransformerModel,
    iteration_flops,
    expert_parameters,
    layer_gemms,
    layer_parameters,
    logits_gemm,
    model_flops,
)

# Memory traffic of the optimizer step, bytes per parameter it updates. Mixed precision (Megatron's
# FP16 optimizer + apex FusedAdam): copy fp16 grads into fp32 (2 read + 4 write), inf check (4),
# grad-norm and clipping (4 + 8), Adam (read param, grad, m, v: 16; write param, m, v: 12), copy
# the fp32 params back to fp16 (4 + 2), zero the grads (2): 58. fp32: Adam (28) + norm/clip (12)
# + zero grads (4): 44.
# fp8 (Transformer Engine): the mixed-precision step, then the new bf16 weight cast to fp8 and
# transposed (read 2, write 1, twice): 62.
OPTIMIZER_BYTES_PER_PARAM = {"mixed": 58, "fp32": 44, "fp8": 62}
# DeepSpeed CPU-Adam on the host (ZeRO-Offload): read fp32 param, grad, m, v; write param, m, v and
# the fp16 copy: 30 bytes per parameter, bound by host memory bandwidth.
CPU_ADAM_BYTES_PER_PARAM = 30


# ---------------------------------------------------------------------------------------------
# one layer, one micro-batch


@dataclass(frozen=True)
class LayerCost:
    """Seconds for one layer and one micro-batch on one GPU (tensor-parallel rank)."""

    forward: float  # GEMMs + element-wise kernels
    backward: float  # GEMMs (input and weight gradients) + element-wise kernels
    attention_core: float  # the forward part selective recomputation repeats
    tp_comm: float  # one all-reduce (or all-gather + reduce-scatter) of the layer's output
    gemm_share: float  # fraction of forward+backward compute time spent in GEMMs
    ep_comm: float = 0.0  # one all-to-all of the tokens among the expert-parallel ranks


@dataclass(frozen=True)
class _KernelBytes:
    """HBM bytes of one layer's memory-bound kernels for one micro-batch, grouped by the
    efficiency they stream at (see :mod:`apportion.perf.roofline`)."""

    other_fwd: float  # LayerNorms, bias broadcast, copies, bias-dropout-adds, bias-GeLU: η_mem
    other_bwd: float
    softmax_fwd: float  # fused scale-mask-softmax over the s × s scores: ATTENTION_CORE_EFFICIENCY
    softmax_bwd: float
    dropout: float  # attention dropout, forward (and again backward): DROPOUT_EFFICIENCY
    H: float  # s·b·h elements, the size of one tensor-parallel all-reduce


def _elementwise_bytes(model: TransformerModel, b: int, t: int, sp: bool, e: int, slots: float = 1.0,
                       fp8: bool = False) -> _KernelBytes:
    """Bytes of the memory-bound kernels of one layer (forward, backward), by kernel family.

    Derived from the kernels Megatron-LM ran in 2021 (NVIDIA/Megatron-LM, megatron/model/
    transformer.py and megatron/fused_kernels/):

    * the causal softmax (``scaled_upper_triang_masked_softmax.h``) loads only the row's
      unmasked prefix, ``element_index < local_seq`` with ``local_seq = row + 1``, and writes
      the whole row (zeros past the diagonal): forward ``e·A/2`` read + ``e·A`` written =
      1.5e·A; its backward loads the prefix of the gradient and of the output and writes the
      whole row: 2e·A. The padding-mask kernel of an encoder reads everything: 2e·A and 3e·A.
    * the LayerNorm backward (``layer_norm_cuda_kernel.cu``, ``HostLayerNormGradient``) runs
      ``cuComputePartGradGammaBeta`` (reads dout and input) and then ``cuComputeGradInput``
      (reads both again, writes the input gradient): 5e per element, not 3e.
    """
    s, h = model.seq, model.hidden
    H = s * b * h
    Hr = H / t if sp else H  # LayerNorm/dropout tensors: split only under sequence parallelism
    A = b * (model.heads / t) * s * s  # attention scores per rank
    F = slots * s * b * model.ffn / t  # a mixture of experts runs c·k slots per token
    Q = s * b * model.qkv_width / t
    act_f = (3 * e if model.gated_mlp else 2 * e) * F  # bias-GeLU (or SiLU(gate)·up)
    act_b = (5 * e if model.gated_mlp else 4 * e) * F  # its backward and the bias gradient
    softmax_f, softmax_b = (1.5 * e * A, 2 * e * A) if model.causal else (2 * e * A, 3 * e * A)
    forward = (
        2 * e * Hr  # LayerNorm 1
        + 2 * e * Q  # QKV bias broadcast into the output before the GEMM (addmm with beta = 1)
        + 2 * e * H / t  # context [b·heads, s, d] -> [s, b, h/t] copy
        + (3 * e + 1) * Hr  # bias-dropout-add after the projection
        + 2 * e * Hr  # LayerNorm 2
        + act_f
        + (3 * e + 1) * Hr  # bias-dropout-add after FC2
    )
    backward = (
        2 * 5 * e * Hr  # two LayerNorm backwards (two kernels, each reading dout and the input)
        + 2 * 3 * e * Hr  # two residual-gradient accumulations
        + 2 * e * H / t  # context copy backward
        + 2 * (3 * e + 1) * Hr  # two bias-dropout-add backwards with bias-gradient reductions
        + act_b
        + e * Q  # QKV bias gradient
    )
    if model.is_moe:
        # router probabilities and top-k (fp32), the tokens permuted into expert order and back,
        # weighted and summed (read and write each slot), forward and backward alike
        moe = 12 * s * b * model.experts + 4 * e * slots * H / t
        forward += moe
        backward += moe
    if fp8:
        # Transformer Engine casts each product's input to fp8 (read 2, write 1 byte, with its
        # scale's max) before QKV, the projection, FC1 and FC2, and each output gradient in the backward
        forward += 3 * (H + H / t + slots * H / t + F)
        backward += 3 * (Q + H + slots * s * b * model.mlp_in_width / t + slots * H / t)
    return _KernelBytes(forward, backward, softmax_f, softmax_b, (2 * e + 1) * A, H)


def expert_slots(model: TransformerModel, capacity_factor: float | None) -> float:
    """Token slots a mixture-of-experts MLP computes per token: k experts × the capacity factor."""
    if not model.is_moe:
        return 1.0
    return model.top_k * (capacity_factor if capacity_factor is not None else 1.0)


@lru_cache(maxsize=8192)
def _layer_cost(model: TransformerModel, acc_key: tuple, b: int, t: int, sp: bool, precision: str,
                software: SoftwareProfile, ep: int = 1, capacity_factor: float | None = None) -> LayerCost:
    acc = _ACCELERATORS[acc_key]
    fp8 = precision == "fp8"
    act_precision = "bf16" if fp8 else precision  # fp8 is for the products; the rest runs in bf16
    e = BYTES[act_precision]
    gemms = layer_gemms(model, b, t, ep, capacity_factor)
    core = ("scores", "context")  # attention core: memory roof at ATTENTION_CORE_EFFICIENCY
    flash = software.flash_attention
    g_eff, k_eff = software.gemm_efficiency, software.kernel_efficiency

    def gt(g) -> float:
        in_core = g.name.split(".")[0] in core
        eff = ATTENTION_CORE_EFFICIENCY if in_core else MEMORY_EFFICIENCY
        return gemm_time(g, acc, act_precision if in_core or g.name.startswith("router") else precision,
                         memory_efficiency=eff).seconds / g_eff

    if flash:
        gemms = [g for g in gemms if g.name not in core]
    g_fwd = {g.name: gt(g) for g in gemms}
    g_bwd = sum(gt(x) for g in gemms for x in g.backward())
    slots = expert_slots(model, capacity_factor)
    kb = _elementwise_bytes(model, b, t, sp, e, slots, fp8)
    if flash:
        # one fused kernel: QKᵀ and scores·V at the measured FlashAttention-2 rate, the backward
        # recomputing the scores (2.5 × the forward's FLOPs); a causal mask skips half the blocks
        flops = 4 * b * model.heads / t * model.seq ** 2 * model.head_dim * (0.5 if model.causal else 1.0)
        attention_f = flops / (acc.flash_attention_efficiency * acc.peak(precision)) / g_eff
        attention_b, core_f = 2.5 * attention_f, 0.0
    else:
        dropout = memory_time(kb.dropout, acc, DROPOUT_EFFICIENCY)  # the same bytes forward and backward
        softmax_f = memory_time(kb.softmax_fwd, acc, ATTENTION_CORE_EFFICIENCY)
        softmax_b = memory_time(kb.softmax_bwd, acc, ATTENTION_CORE_EFFICIENCY)
        attention_f = (softmax_f + dropout) / k_eff
        attention_b = (softmax_b + dropout) / k_eff
        core_f = g_fwd["scores"] + g_fwd["context"] + attention_f
    forward = sum(g_fwd.values()) + memory_time(kb.other_fwd, acc) / k_eff + attention_f
    backward = g_bwd + memory_time(kb.other_bwd, acc) / k_eff + attention_b
    comm = allreduce_time(e * kb.H, _TP_GROUPS[(acc_key, t)], acc) / software.comm_efficiency if t > 1 else 0.0
    ep_comm = 0.0
    if model.is_moe and ep > 1:  # the tokens (their c·k slots, split among the tensor-parallel ranks) to the experts
        group = ep_group(Layout(tp=t, dp=ep, ep=ep), acc)
        ep_comm = alltoall_time(e * slots * kb.H / t, group, acc) / software.comm_efficiency
    gemm_total = sum(g_fwd.values()) + g_bwd
    return LayerCost(forward, backward, core_f, comm, gemm_total / (forward + backward), ep_comm)


_ACCELERATORS: dict[tuple, Accelerator] = {}
_TP_GROUPS: dict[tuple, object] = {}


def _acc_key(acc: Accelerator) -> tuple:
    key = acc.figures
    _ACCELERATORS.setdefault(key, acc)
    return key


def layer_cost(model: TransformerModel, acc: Accelerator, micro_batch: int, tp: int, sequence_parallel: bool,
               precision: str, software: SoftwareProfile = MEGATRON_LM, ep: int = 1,
               capacity_factor: float | None = None) -> LayerCost:
    key = _acc_key(acc)
    if (key, tp) not in _TP_GROUPS:
        _TP_GROUPS[(key, tp)] = tp_group(Layout(tp=tp), acc)
    return _layer_cost(model, key, micro_batch, tp, sequence_parallel and tp > 1, precision, software, ep,
                       capacity_factor if model.is_moe else None)


# ---------------------------------------------------------------------------------------------
# the prediction


@dataclass
class Prediction:
    """One layout's predicted iteration: time, throughput, memory, and whether it fits."""

    model: TransformerModel
    layout: Layout
    accelerator: str
    step_time_s: float
    tflops_per_gpu: float  # hardware FLOPs (recomputation counted, the Megatron papers' convention)
    mfu: float  # model FLOPs (no recomputation) / (time · GPUs · peak)
    memory: MemoryBreakdown
    memory_capacity_bytes: float
    fits: bool
    reasons: list[str] = field(default_factory=list)
    breakdown_s: dict[str, float] = field(default_factory=dict)
    tokens_per_s: float = 0.0
    price_per_gpu_hour: float | None = None
    software: str = MEGATRON_LM.name

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    def training_time_s(self, tokens: float) -> float:
        return tokens / self.tokens_per_s

    def cost_usd(self, tokens: float) -> float | None:
        if self.price_per_gpu_hour is None:
            return None
        return self.training_time_s(tokens) / 3600 * self.price_per_gpu_hour * self.gpus

    def to_dict(self, tokens: float | None = None) -> dict:
        out = {
            "model": self.model.name,
            "gpu_type": self.accelerator,
            "gpus": self.gpus,
            "layout": self.layout.as_dict(),
            "step_time_s": self.step_time_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "memory_gb_per_gpu": self.memory.as_gb(),
            "memory_capacity_gb": self.memory_capacity_bytes / GB,
            "fits": self.fits,
            "reasons": list(self.reasons),
            "time_breakdown_s": dict(self.breakdown_s),
            "tokens_per_s": self.tokens_per_s,
            "software": self.software,
        }
        if tokens is not None:
            out["tokens"] = tokens
            out["training_time_s"] = self.training_time_s(tokens)
            out["cost_usd"] = self.cost_usd(tokens)
        return out


def _stage_params(model: TransformerModel, layout: Layout, counts: tuple[int, ...] | None = None) -> list[float]:
    """Parameters on one GPU of each pipeline stage, holding ``counts[i]`` layers (default l/p each).

    The first stage also holds the word (and position) embedding; the last the output layer: its
    own copy of a tied embedding when p > 1 (Megatron-LM keeps one and all-reduces its gradient
    with the first stage), or the untied output.
    """
    t, p = layout.tp, layout.pp
    per_layer = (layer_parameters(model, experts=0) + expert_parameters(model) * model.experts / layout.ep) / t
    words = model.vocab * model.hidden / t
    positions = model.seq * model.hidden if model.learned_positions else 0
    output = words if (p > 1 or not model.tied_embeddings) else 0.0
    if counts is None:
        counts = (model.layers / p,) * p
    params = [n * per_layer for n in counts]
    params[0] += words + positions
    params[-1] += output
    return params


def stage_in_flight(layout: Layout, stage: int) -> float:
    """Micro-batches whose activations pipeline stage ``stage`` (0 = first) holds at its peak.

    1F1B: stage i holds p − i (Narayanan et al. 2021, §2.2); GPipe all m; interleaved, from
    Megatron-LM's warm-up of (p − i − 1)·2 + (v − 1)·p chunk micro-batches plus the one running,
    each 1/v of a stage: p + (p − 1)/v on the first stage (Korthikanti et al. §4.2.3). At most m.
    """
    p, m = layout.pp, layout.microbatches
    if p <= 1 or layout.schedule == "none":
        return 1.0
    if stage == 0:
        return in_flight_microbatches(layout.schedule, p, m, layout.virtual_stages)
    if layout.schedule == "gpipe":
        return float(m)
    if layout.schedule == "interleaved":
        v = layout.virtual_stages
        return min(float(m), ((p - stage - 1) * 2 + (v - 1) * p + 1) / v)
    return float(min(p - stage, m))


def _activation_bytes(model: TransformerModel, layout: Layout, stage: int, layers: int, flash: bool = False) -> float:
    t, p, b = layout.tp, layout.pp, layout.micro_batch
    fp8 = layout.precision == "fp8"
    e = BYTES["bf16" if fp8 else layout.precision]
    sp = layout.sequence_parallel and t > 1
    slots = expert_slots(model, layout.capacity_factor)
    g = 1 if fp8 else None
    per_layer = layer_activation_bytes(model, b, t, layout.recompute, sp, e, flash, slots, g)
    held = stage_in_flight(layout, stage)
    stored = layers * per_layer * held
    # what the backward of one layer materialises on top: the whole layer (full recomputation)
    # or its attention core (selective)
    if layout.recompute == "full":
        stored += layer_working_bytes(model, b, t, sp, e, flash, slots, g)
    elif layout.recompute == "selective" and not flash:
        stored += (2 * e + 1) * model.heads / t * model.seq ** 2 * b
    sbh = model.seq * b * model.hidden
    if stage == 0:
        stored += sbh * held  # embedding dropout mask (1 byte each), per micro-batch in flight
    if stage == p - 1:
        stored += (e + 4) * model.seq * b * model.vocab / t  # logits and their fp32 copy in the loss
    return stored


def _candidate_stages(counts: tuple[int, ...]) -> list[int]:
    """The stages that can hold the most memory: the first, the last, and among the middle ones
    the first of each layer count above the first stage's (a later stage with as many layers
    holds no more in flight, and the first stage's embedding is extra)."""
    p = len(counts)
    picked = [0] if p == 1 else [0, p - 1]
    seen = {counts[0]}
    for i in range(1, p - 1):
        if counts[i] > counts[0] and counts[i] not in seen:
            seen.add(counts[i])
            picked.append(i)
    return picked


def balanced_stage_layers(layers: int, pp: int, layer_time: float, first_extra: float,
                          last_extra: float) -> tuple[int, ...]:
    """The split of ``layers`` over ``pp`` stages whose slowest stage is fastest.

    Stage i takes ``n_i · layer_time`` plus the embedding's time on the first stage and the
    output layer and loss on the last (as BLOOM and Llama 3 took layers off their end stages).
    The smallest stage time T for which the stages' capacities ``floor((T − extra_i) / layer_time)``
    hold every layer is found among the times a stage can take; the layers those capacities hold
    beyond the model's are then taken away one at a time from the first stage (it holds the most
    activations), the last, then the middle ones in order, and round again. ValueError when
    there are fewer layers than stages.
    """
    if layers < pp:
        raise ValueError(f"layers ({layers}) are fewer than the pipeline stages ({pp})")
    if pp == 1:
        return (layers,)
    c = max(layer_time, 1e-30)

    def capacity(T: float) -> tuple[int, int, int]:  # first, each middle, last
        return tuple(max(0, int((T - x) / c + 1e-9)) for x in (first_extra, 0.0, last_extra))

    def holds(T: float) -> bool:
        first, middle, last = capacity(T)
        return first + middle * (pp - 2) + last >= layers and min(first, last, middle if pp > 2 else 1) >= 1

    # every stage holds ceil(layers / pp) layers once T covers that plus the larger extra
    top = -(-layers // pp) + int(max(first_extra, last_extra) / c) + 1
    candidates = sorted({k * c + x for x in (first_extra, 0.0, last_extra) for k in range(1, top + 1)})
    lo, hi = 0, len(candidates) - 1
    while lo < hi:  # capacity grows with T: the first T that holds everything, each stage ≥ 1 layer
        mid = (lo + hi) // 2
        if holds(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    first, middle, last = capacity(candidates[lo])
    counts = [first] + [middle] * (pp - 2) + [last]
    excess = sum(counts) - layers
    order = [0, pp - 1] + list(range(1, pp - 1))
    while excess:  # one layer at a time, round the stages in that order
        for i in order:
            if excess and counts[i] > 1:
                counts[i] -= 1
                excess -= 1
    return tuple(counts)


def resolve_stage_layers(model: TransformerModel, layout: Layout, layer_time: float, first_extra: float,
                         last_extra: float) -> tuple[int, ...]:
    """The layout's layers per stage: as given, else even when the stages divide the layers, else
    the split that balances the stages' times (:func:`balanced_stage_layers`)."""
    if layout.stage_layers is not None:
        return layout.stage_layers
    even = even_stage_layers(model.layers, layout.pp)
    if even is not None:
        return even
    return balanced_stage_layers(model.layers, layout.pp, layer_time, first_extra, last_extra)


def predict(model: TransformerModel, layout: Layout, accelerator: Accelerator | str,
            software: SoftwareProfile | None = None) -> Prediction:
    """Predict ``layout``'s iteration of ``model`` on ``accelerator`` as ``software`` runs it (default:
    the hardware model, Megatron-LM's kernels); raises ValueError for an invalid layout."""
    acc = get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    software = software or MEGATRON_LM
    g_eff, k_eff, c_eff = software.gemm_efficiency, software.kernel_efficiency, software.comm_efficiency
    check_layout(model, layout)
    if layout.precision == "fp8" and "fp8" not in acc.peak_flops:
        fp8_gpus = ", ".join(name for name, a in ACCELERATORS.items() if "fp8" in a.peak_flops)
        raise ValueError(f"fp8 needs FP8 tensor cores ({fp8_gpus}); the {acc.name} has none")
    t, p, d, b = layout.tp, layout.pp, layout.dp, layout.micro_batch
    m = layout.microbatches
    v = layout.virtual_stages if layout.schedule == "interleaved" else 1
    precision = layout.precision
    e = BYTES["bf16" if precision == "fp8" else precision]  # activations, gradients on the wire
    sp = layout.sequence_parallel and t > 1

    # --- one micro-batch on one GPU -------------------------------------------------------
    cost = layer_cost(model, acc, b, t, sp, precision, software, layout.ep, layout.capacity_factor)
    tp_passes = {"none": 4, "selective": 4, "full": 6}[layout.recompute]
    ep_passes = tp_passes  # dispatch and combine, forward, backward (and the recomputed forward)
    layer_fwd = cost.forward
    layer_bwd = cost.backward
    if layout.recompute == "full":
        layer_bwd += cost.forward
    elif layout.recompute == "selective":
        layer_bwd += cost.attention_core
    layer_compute = layer_fwd + layer_bwd
    layer_comm = tp_passes * cost.tp_comm + ep_passes * cost.ep_comm
    layer_time = layer_compute + layer_comm

    sbh = model.seq * b * model.hidden
    Hr = sbh / t if sp else sbh
    # lookup + positions + dropout, and backward
    emb = memory_time((7 * e + 1) * Hr + (5 * e + 1) * Hr, acc) / k_eff
    lg = logits_gemm(model, b, t)
    logits = gemm_time(lg, acc, precision).seconds
    logits += sum(gemm_time(x, acc, precision).seconds for x in lg.backward())
    if precision == "fp8":  # the output layer's input and output gradient cast to fp8
        logits += memory_time(3 * (sbh + model.seq * b * model.vocab / t), acc)
    loss_elems = model.seq * b * model.vocab / t
    # final norm fwd (2e) + bwd (5e), vocab-parallel loss
    head = logits / g_eff + memory_time((7 * e) * Hr + 30 * loss_elems, acc) / k_eff
    if t > 1:  # the loss's max and sum
        head += 2 * allreduce_time(4 * model.seq * b, tp_group(layout, acc), acc) / c_eff
    head += cost.tp_comm  # the all-reduce of the logits' input gradient (column-parallel output layer)
    emb += cost.tp_comm  # the vocabulary-parallel embedding's forward all-reduce
    counts = resolve_stage_layers(model, layout, layer_time, emb, head)
    stage_times = [n * layer_time + software.microbatch_overhead_s for n in counts]
    stage_times[0] += emb
    stage_times[-1] += head
    slowest = max(stage_times)
    slowest_stage = stage_times.index(slowest)
    mean = sum(stage_times) / len(stage_times)
    pipeline = m * slowest + bubble_fraction(layout.schedule, p, m, v) * m * mean
    p2p = 2 * v * m * p2p_time(e * sbh, layout, acc) / c_eff if p > 1 else 0.0

    # --- parameters, gradients, optimizer --------------------------------------------------
    stage_params = _stage_params(model, layout, counts)
    params_local = max(stage_params)  # the stage with the most to reduce and update
    dp_stage = stage_params.index(params_local)
    layers = counts[dp_stage]
    # a stage's expert weights are reduced, sharded and updated among the d/ep ranks that hold them
    expert_local = layers * expert_parameters(model) * model.experts / layout.ep / t if model.is_moe else 0.0
    dense_local = params_local - expert_local
    grad_bytes = state_bytes_per_param(precision)[1]
    dp = dp_group(layout, acc)
    edp = expert_dp_group(layout, acc)
    de = d // layout.ep
    last_bwd = layers * (layer_bwd + cost.tp_comm * (tp_passes // 2))  # last micro-batch's backward
    bucket_share = 1 / max(1, layers)

    def exposed(comm: float, window: float) -> float:
        return max(0.0, comm - window) + comm * bucket_share

    full_reduce = (allreduce_time(dense_local * grad_bytes, dp, acc, DP_INTER_EFFICIENCY)
                   + allreduce_time(expert_local * grad_bytes, edp, acc, DP_INTER_EFFICIENCY)) / c_eff
    gather = (allgather_time(dense_local * e, dp, acc, DP_INTER_EFFICIENCY)
              + allgather_time(expert_local * e, edp, acc, DP_INTER_EFFICIENCY)) / c_eff
    if layout.zero in (0, 1):
        reduce_part = full_reduce if layout.zero == 0 else full_reduce / 2
        dp_comm = exposed(reduce_part, last_bwd) if layout.overlap_grad_reduce else reduce_part
        if layout.zero == 0 and d > 1:
            # the gradient copies around the reduction, on the compute stream: PyTorch DDP copies
            # each gradient into its bucket and back (2 × read + write); Megatron-LM's 2021 local
            # DDP (no contiguous buffer) flattens the gradients, divides them by d in place and
            # copies them back (megatron/model/distributed.py: _flatten_dense_tensors, /=, copy_)
            dp_comm += memory_time((4 if layout.overlap_grad_reduce else 6) * grad_bytes * params_local, acc) / k_eff
        if layout.zero == 1:
            dp_comm += gather
    elif layout.zero == 2:
        per_mb = full_reduce / 2
        dp_comm = m * exposed(per_mb, last_bwd) + gather
    else:  # ZeRO-3: gather each layer's weights for forward (and recompute) and backward, reduce-scatter grads,
        # layer by layer (so each collective pays its latency), prefetched under the compute
        fwd_passes = 2 if layout.recompute == "full" else 1
        n = max(1, layers)
        layer_gather = n * allgather_time(params_local * e / n, dp, acc, DP_INTER_EFFICIENCY) / c_eff
        layer_reduce = n * allgather_time(params_local * grad_bytes / n, dp, acc, DP_INTER_EFFICIENCY) / c_eff
        dp_comm = m * (fwd_passes * exposed(layer_gather, layers * layer_fwd)
                       + exposed(layer_gather + layer_reduce, last_bwd))
    embedding_sync = 0.0
    if p > 1 and model.tied_embeddings:
        embedding_sync = allreduce_time(model.vocab * model.hidden / t * grad_bytes, Group(2, 1), acc) / c_eff

    optimizer_params = (dense_local / d + expert_local / de) if layout.zero >= 1 else params_local
    accumulate = max(0, m - 1) * memory_time(3 * grad_bytes * params_local / (d if layout.zero >= 2 else 1), acc) / k_eff
    offload = 0.0
    if layout.offload:
        pcie, host = acc.host_link_bandwidth, acc.host_memory_bandwidth
        to_host = optimizer_params * grad_bytes / pcie
        offload = exposed(to_host, last_bwd) + optimizer_params * CPU_ADAM_BYTES_PER_PARAM / host
        offload += optimizer_params * e / pcie  # updated fp16 parameters back to the GPU
        optimizer = 0.0
    else:
        kind = {"fp16": "mixed", "bf16": "mixed", "fp8": "fp8"}.get(precision, "fp32")
        optimizer = memory_time(OPTIMIZER_BYTES_PER_PARAM[kind] * optimizer_params, acc) / k_eff

    step = pipeline + p2p + dp_comm + embedding_sync + accumulate + optimizer + offload
    hw_flops = iteration_flops(model, layout.global_batch, layout.recompute)
    tflops = hw_flops / (step * layout.gpus) / 1e12
    # MFU against the dense bf16 peak when the products run in fp8 (the convention of NVIDIA's reports)
    mfu = model_flops(model, layout.global_batch) / (step * layout.gpus * acc.peak("bf16" if precision == "fp8"
                                                                                   else precision))

    # --- memory ------------------------------------------------------------------------------
    parts = []
    for i in _candidate_stages(counts):
        experts_here = counts[i] * expert_parameters(model) * model.experts / layout.ep / t if model.is_moe else 0.0
        dense = model_state_bytes(stage_params[i] - experts_here, precision, layout.zero, d, layout.offload)
        expert = model_state_bytes(experts_here, precision, layout.zero, de, layout.offload)
        states = ModelStates(dense.weights + expert.weights, dense.gradients + expert.gradients,
                             dense.optimizer + expert.optimizer)
        parts.append(MemoryBreakdown(states.weights, states.gradients, states.optimizer,
                                     _activation_bytes(model, layout, i, counts[i], software.flash_attention),
                                     software.memory_overhead_gb * GB))
    memory = max(parts, key=lambda x: x.total)
    fits = memory.total <= acc.memory_bytes
    reasons = []
    if not fits:
        gb = memory.as_gb()
        reasons.append(
            f"needs {gb['total']:.1f} GB per GPU, more than the {acc.name}'s {acc.memory_bytes / GB:.0f} GB "
            f"(weights {gb['weights']:.1f}, gradients {gb['gradients']:.1f}, optimizer {gb['optimizer']:.1f}, "
            f"activations {gb['activations']:.1f}" + (f", other {gb['other']:.1f}" if gb["other"] else "") + ")")

    host = m * software.microbatch_overhead_s
    ep_comm = m * counts[slowest_stage] * ep_passes * cost.ep_comm
    breakdown = {
        "compute": m * (slowest - counts[slowest_stage] * layer_comm) - host,
        "tensor_parallel_comm": m * counts[slowest_stage] * layer_comm - ep_comm,
        "expert_parallel_comm": ep_comm,
        "pipeline_bubble": pipeline - m * slowest,
        "pipeline_p2p": p2p,
        "data_parallel_comm": dp_comm + embedding_sync,
        "grad_accumulation": accumulate,
        "optimizer": optimizer + offload,
        "host_overhead": host,
    }
    if layout.stage_layers is None and counts != even_stage_layers(model.layers, p):
        layout = replace(layout, stage_layers=counts)  # say which split was predicted
    return Prediction(
        model=model, layout=layout, accelerator=acc.name, step_time_s=step, tflops_per_gpu=tflops, mfu=mfu,
        memory=memory, memory_capacity_bytes=acc.memory_bytes, fits=fits, reasons=reasons, breakdown_s=breakdown,
        tokens_per_s=layout.global_batch * model.seq / step, price_per_gpu_hour=acc.price_per_hour,
        software=software.name,
    )
