"""A parallel layout, the constraints it must meet, and the time of its communication.

Layout: t-way tensor parallelism (Megatron-LM's column/row split, Shoeybi et al. 2019),
p-way pipeline parallelism with a GPipe, 1F1B or interleaved 1F1B schedule (Narayanan et al.
2021, §2.2), d-way data parallelism, optionally with ZeRO (Rajbhandari et al. 2020). Ranks are
laid out as Megatron-LM does it: tensor-parallel ranks are adjacent, then data-parallel, then
pipeline stages outermost; so a tensor-parallel group of t ≤ GPUs-per-node sits inside one node,
a data-parallel group has min(d, G/t) members per node (1 when t fills the node), and pipeline
sends are timed as crossing nodes once t·d ≥ G or the job spans more than one node.

Collectives are bandwidth-optimal ring algorithms (Patarasuk & Yuan 2009; NCCL): an all-reduce
of S bytes over n ranks moves ``2(n−1)/n · S`` per rank, a reduce-scatter or all-gather half
that. A group that spans N nodes with G of its members in each is reduced hierarchically
(within the node over NVLink, across nodes over each GPU's own network adapter):

    T_allreduce = 2(G−1)/G · S / B_intra  +  2(N−1)/N · S / (G · B_inter)  +  2(n−1)·α

with B_intra and B_inter the catalog's per-GPU, per-direction link bandwidths scaled by the
fraction of them NCCL reaches, and α a per-step latency. Those fractions are public nccl-tests
measurements: an all-reduce among the 8 NVLink/NVSwitch-connected A100s of one server reaches a
bus bandwidth of about 200 GB/s of the 300 GB/s per direction (NVIDIA/nccl-tests issues #149,
"~200 GB/s", and #178, "208 GBps"): 0.67; across nodes over HDR InfiniBand it reaches 84.8 GB/s
on average of the 100 GB/s its four 200 Gb/s adapters carry for 8 GPUs (nccl-tests issue #119;
issue #100 reports 91 of 100): 0.85. Both are A100-system measurements, used for every GPU.

Point-to-point between pipeline stages sends each micro-batch's boundary activation (b·s·h
elements); across nodes Megatron's scatter/gather optimisation (Narayanan et al. §4.1)
sends 1/t of it over each of the t adapters and all-gathers it over NVLink.

The data-parallel reduction of a large job is slower across nodes than a two-node nccl-tests
run: every data-parallel group of the job reduces at the same time, through the same fabric.
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys'23,
arXiv 2205.05198, §6.3), measured it on Selene (DGX A100, 8 HDR adapters per node): taking the
530B model (t = 8, p = 35) from one to 8-way data parallelism, with the same batch per
replica and no overlap, raised the iteration from 37.83 to 39.15 s. The 1.32 s is one
all-reduce of a stage's gradients (2.06·10⁹ parameters on the first stage) among 8 ranks, one
per node; it implies an effective cross-node efficiency of 0.44 of the line rate if the
gradients were fp32 (Megatron-LM reduces in fp32 when training in bf16) and 0.22 if fp16. The
paper does not say which; ``DP_INTER_EFFICIENCY`` takes the higher (the smaller correction),
0.44, for the collectives of data-parallel groups that span nodes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from apportion.perf.accelerators import Accelerator
from apportion.perf.transformer import RECOMPUTE_MODES, TransformerModel

SCHEDULES = ("none", "gpipe", "1f1b", "interleaved")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")

# Per-step latency of a collective (seconds). Estimates of NCCL's per-hop latency over NVLink and
# InfiniBand (a few microseconds); not from a published table: they matter only for small messages.
ALPHA_INTRA_S = 5e-6
ALPHA_INTER_S = 10e-6
# Achieved fraction of link bandwidth for NCCL collectives and sends (see the module docstring).
NCCL_INTRA_EFFICIENCY = 200 / 300
NCCL_INTER_EFFICIENCY = 84.8 / 100
# Cross-node efficiency of a data-parallel reduction when the whole job reduces at once
# (Korthikanti et al. 2022, §6.3; see the module docstring): the fp32 all-reduce of 2.06e9
# gradients among 8 nodes takes 0.68 s at 0.848 and 1.32 s measured: 0.848 × 0.68 / 1.32 = 0.44.
DP_INTER_EFFICIENCY = 0.44


@dataclass(frozen=True)
class Layout:
    """How one training job is split over ``tp·pp·dp`` GPUs."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"  # none | selective | full
    sequence_parallel: bool = False
    zero: int = 0  # 0, 1, 2, 3
    offload: bool = False  # ZeRO-Offload: optimizer state (and gradients for stage ≥ 2) on the host
    schedule: str = "1f1b"  # none (pp = 1) | gpipe | 1f1b | interleaved
    virtual_stages: int = 1  # model chunks per GPU, interleaved schedule only
    overlap_grad_reduce: bool = True  # data-parallel reduction overlapped with the last backward
    precision: str = "bf16"
    # layers on each pipeline stage, first to last; None: an even split when the stages divide the
    # layers, otherwise the split that balances the stages' times (embedding and loss counted)
    stage_layers: tuple[int, ...] | None = None
    ep: int = 1  # expert parallelism: the experts of a mixture-of-experts layer split over ep of the d ranks
    capacity_factor: float | None = None  # token slots per expert over the balanced share; None: dropless

    def __post_init__(self) -> None:
        if self.stage_layers is not None and not isinstance(self.stage_layers, tuple):
            object.__setattr__(self, "stage_layers", tuple(self.stage_layers))

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per iteration (m = B / (b·d))."""
        return self.global_batch // (self.micro_batch * self.dp)

    def describe(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}", f"mb={self.micro_batch}",
                 f"recompute={self.recompute}"]
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero:
            parts.append(f"zero={self.zero}")
        if self.offload:
            parts.append("offload")
        if self.pp > 1:
            parts.append(self.schedule + (f"(v={self.virtual_stages})" if self.schedule == "interleaved" else ""))
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.capacity_factor is not None:
            parts.append(f"capacity={self.capacity_factor:g}")
        if self.precision == "fp8":
            parts.append("fp8")
        if self.stage_layers is not None:
            parts.append(f"stages={format_stage_layers(self.stage_layers)}")
        return " ".join(parts)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["stage_layers"] = list(self.stage_layers) if self.stage_layers is not None else None
        return out


def format_stage_layers(counts: tuple[int, ...]) -> str:
    """Layers per stage, runs of equal counts written NxK: (7, 8, 8, 8, 7) -> '7,8x3,7'."""
    runs: list[list[int]] = []
    for n in counts:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ",".join(f"{n}x{k}" if k > 1 else str(n) for n, k in runs)


def parse_stage_layers(text: str) -> tuple[int, ...]:
    """'7,8x14,7' (or '7,8,8,…,7') -> the layers per stage; ValueError naming the bad item."""
    counts: list[int] = []
    for item in text.replace(" ", "").split(","):
        value, _, repeat = item.lower().partition("x")
        try:
            n, k = int(value), int(repeat) if repeat else 1
        except ValueError:
            raise ValueError(f"stage layers must be counts such as 7,8x14,7; '{item}' is not one") from None
        if n < 1 or k < 1:
            raise ValueError(f"stage layers must be positive counts such as 7,8x14,7; got '{item}'")
        counts += [n] * k
    return tuple(counts)


def even_stage_layers(layers: int, pp: int) -> tuple[int, ...] | None:
    """The even split of ``layers`` over ``pp`` stages, or None when they do not divide."""
    return (layers // pp,) * pp if layers % pp == 0 else None


def size_problems(layout: Layout) -> list[str]:
    """The sizes (tp, pp, dp, micro-batch, global batch, virtual stages, ep) that are not positive
    whole numbers; every other constraint assumes they are."""
    return [f"{name} must be a positive integer, got {value!r}"
            for name, value in (("tensor-parallel size", layout.tp), ("pipeline-parallel size", layout.pp),
                                ("data-parallel size", layout.dp), ("micro-batch size", layout.micro_batch),
                                ("global batch", layout.global_batch), ("virtual stages", layout.virtual_stages),
                                ("expert-parallel size", layout.ep))
            if not isinstance(value, int) or value < 1]


def layout_problems(model: TransformerModel, layout: Layout) -> list[str]:
    """Every constraint the layout breaks, each naming the constraint; empty when it is valid."""
    problems = size_problems(layout)
    if problems:
        return problems
    t, p, d, b, B = layout.tp, layout.pp, layout.dp, layout.micro_batch, layout.global_batch
    if layout.recompute not in RECOMPUTE_MODES:
        problems.append(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {layout.recompute!r}")
    if layout.precision not in PRECISIONS:
        problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {layout.precision!r}")
    if model.heads % t:
        problems.append(f"attention heads ({model.heads}) are not divisible by the tensor-parallel size {t}")
    elif model.kv % t:
        problems.append(f"key/value heads ({model.kv}) are not divisible by the tensor-parallel size {t}")
    if model.ffn % t:
        problems.append(f"MLP hidden size ({model.ffn}) is not divisible by the tensor-parallel size {t}")
    v = layout.virtual_stages
    if layout.schedule not in SCHEDULES:
        problems.append(f"schedule must be one of {', '.join(SCHEDULES)}, got {layout.schedule!r}")
    elif p == 1 and layout.schedule not in ("none", "1f1b"):
        problems.append(f"the {layout.schedule} schedule needs more than one pipeline stage")
    elif layout.schedule != "interleaved" and v != 1:
        problems.append("virtual stages > 1 need the interleaved schedule")
    elif layout.schedule == "interleaved" and v < 2:
        problems.append("the interleaved schedule needs at least 2 virtual stages per GPU")
    if layout.stage_layers is not None:
        counts = layout.stage_layers
        if len(counts) != p:
            problems.append(f"stage layers name {len(counts)} stages for a pipeline of {p}")
        elif any(not isinstance(n, int) or n < 1 for n in counts):
            problems.append(f"every pipeline stage needs at least one layer, got {format_stage_layers(counts)}")
        elif sum(counts) != model.layers:
            problems.append(f"stage layers {format_stage_layers(counts)} add up to {sum(counts)}, "
                            f"not the model's {model.layers} layers")
        elif v > 1 and any(n % v for n in counts):
            problems.append(f"the interleaved schedule with {v} virtual stages needs every stage's layers "
                            f"divisible by {v}, got {format_stage_layers(counts)}")
    elif model.layers < p:
        problems.append(f"layers ({model.layers}) are fewer than the pipeline stages ({p})")
    elif v > 1 and model.layers % (p * v):
        problems.append(f"layers ({model.layers}) are not divisible by the pipeline stages × virtual stages "
                        f"({p} × {v} = {p * v}); give the layers per stage for an uneven interleaved split")
    if B % (b * d):
        problems.append(f"global batch {B} is not divisible by micro-batch × data-parallel size "
                        f"({b} × {d} = {b * d})")
    elif layout.schedule == "interleaved" and p > 1 and layout.microbatches % p:
        problems.append(f"the interleaved schedule needs the number of micro-batches ({layout.microbatches}) "
                        f"to be a multiple of the pipeline-parallel size {p}")
    if layout.zero not in (0, 1, 2, 3):
        problems.append(f"ZeRO stage must be 0, 1, 2 or 3, got {layout.zero}")
    elif layout.zero >= 2 and p > 1:
        problems.append(f"ZeRO stage {layout.zero} cannot be combined with pipeline parallelism "
                        "(DeepSpeed supports only stages 0 and 1 with pipelines)")
    if layout.offload and layout.zero == 0:
        problems.append("--offload (ZeRO-Offload) needs ZeRO stage 1, 2 or 3")
    if layout.ep > 1 and not model.is_moe:
        problems.append(f"expert parallelism ({layout.ep}) needs a mixture-of-experts model")
    elif model.is_moe and model.experts % layout.ep:
        problems.append(f"the {model.experts} experts are not divisible by the expert-parallel size {layout.ep}")
    elif layout.ep > 1 and d % layout.ep:
        problems.append(f"the expert-parallel size {layout.ep} must divide the data-parallel size {d}")
    if layout.capacity_factor is not None:
        if not model.is_moe:
            problems.append("a capacity factor needs a mixture-of-experts model")
        elif not (isinstance(layout.capacity_factor, (int, float)) and layout.capacity_factor > 0):
            problems.append(f"the capacity factor must be positive, got {layout.capacity_factor!r}")
    if layout.ep > 1 and layout.zero >= 2:
        problems.append(f"ZeRO stage {layout.zero} with expert parallelism is not modelled; use ZeRO 0 or 1")
    return problems


def check_layout(model: TransformerModel, layout: Layout) -> None:
    """Raise ``ValueError`` naming the first broken constraint."""
    problems = layout_problems(model, layout)
    if problems:
        raise ValueError(problems[0])


# ---------------------------------------------------------------------------------------------
# where groups lie


@dataclass(frozen=True)
class Group:
    """A communication group: ``size`` ranks, ``per_node`` of them in each node."""

    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return max(1, -(-self.size // self.per_node))


def tp_group(layout: Layout, acc: Accelerator) -> Group:
    return Group(layout.tp, min(layout.tp, acc.gpus_per_node))


def dp_group(layout: Layout, acc: Accelerator) -> Group:
    per_node = max(1, min(layout.dp, acc.gpus_per_node // layout.tp)) if layout.tp < acc.gpus_per_node else 1
    return Group(layout.dp, per_node)


def ep_group(layout: Layout, acc: Accelerator) -> Group:
    """The ranks sharing one layer's experts: ep of the data-parallel ranks, the innermost ones."""
    per_node = max(1, min(layout.ep, acc.gpus_per_node // layout.tp)) if layout.tp < acc.gpus_per_node else 1
    return Group(layout.ep, per_node)


def expert_dp_group(layout: Layout, acc: Accelerator) -> Group:
    """The ranks holding the same experts, which reduce their gradients: d/ep of them, a node apart
    unless the data-parallel group has room for more than ep of them in one node."""
    d, ep = layout.dp, layout.ep
    per_node = max(1, dp_group(layout, acc).per_node // ep)
    return Group(d // ep, per_node)


def alltoall_time(nbytes: float, group: Group, acc: Accelerator) -> float:
    """All-to-all where each rank sends ``nbytes`` in all, 1/n of it to each rank (itself included):
    the part bound for its node's other ranks over NVLink, the rest over its own network adapter,
    one message latency per peer."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    g = min(group.per_node, n)
    intra = nbytes * (g - 1) / n / _intra(acc) if g > 1 else 0.0
    inter = nbytes * (n - g) / n / _inter(acc) if n > g else 0.0
    return intra + inter + (n - 1) * (ALPHA_INTER_S if n > g else ALPHA_INTRA_S)


def pipeline_crosses_nodes(layout: Layout, acc: Accelerator) -> bool:
    return layout.tp * layout.dp >= acc.gpus_per_node or layout.gpus > acc.gpus_per_node


# ---------------------------------------------------------------------------------------------
# collective times


def _intra(acc: Accelerator) -> float:
    return NCCL_INTRA_EFFICIENCY * acc.intra_node_bandwidth


def _inter(acc: Accelerator, efficiency: float = NCCL_INTER_EFFICIENCY) -> float:
    return efficiency * acc.inter_node_bandwidth


def allreduce_time(nbytes: float, group: Group, acc: Accelerator,
                   inter_efficiency: float = NCCL_INTER_EFFICIENCY) -> float:
    """Hierarchical ring all-reduce of ``nbytes`` per rank (see the module docstring).

    ``inter_efficiency`` is the fraction of the network's line rate the cross-node phase reaches
    (``DP_INTER_EFFICIENCY`` for a data-parallel reduction of a large job).
    """
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    g, nodes = min(group.per_node, n), group.nodes
    intra = 2 * (g - 1) / g * nbytes / _intra(acc) if g > 1 else 0.0
    inter = 2 * (nodes - 1) / nodes * nbytes / (g * _inter(acc, inter_efficiency)) if nodes > 1 else 0.0
    latency = 2 * (n - 1) * (ALPHA_INTER_S if nodes > 1 else ALPHA_INTRA_S)
    return intra + inter + latency


def allgather_time(nbytes: float, group: Group, acc: Accelerator,
                   inter_efficiency: float = NCCL_INTER_EFFICIENCY) -> float:
    """All-gather (or reduce-scatter) whose full result is ``nbytes``: half an all-reduce."""
    return allreduce_time(nbytes, group, acc, inter_efficiency) / 2


def p2p_time(nbytes: float, layout: Layout, acc: Accelerator) -> float:
    """One boundary activation from one pipeline stage to the next."""
    if layout.pp <= 1 or nbytes <= 0:
        return 0.0
    if not pipeline_crosses_nodes(layout, acc):
        return nbytes / _intra(acc) + ALPHA_INTRA_S
    t = layout.tp
    send = nbytes / t / _inter(acc) + ALPHA_INTER_S
    gather = (t - 1) / t * nbytes / _intra(acc) if t > 1 else 0.0
    return send + gather


def bubble_fraction(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Pipeline bubble relative to the ideal time: (p−1)/m, or (p−1)/(v·m) when interleaved."""
    if pp <= 1 or schedule == "none":
        return 0.0
    v = virtual_stages if schedule == "interleaved" else 1
    return (pp - 1) / (v * microbatches)
