"""Memory per GPU: model states by precision and ZeRO stage, activations by recomputation mode.

Model states (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC'20, §3.1 and Figure 1): mixed-precision Adam keeps fp16/bf16 weights (2 bytes per
parameter) and gradients (2 bytes), and K = 12 bytes of optimizer state (fp32 master weights,
momentum, variance): 16 bytes per parameter. Plain fp32 (or tf32) training keeps fp32 weights
and gradients (4 + 4) and Adam's two moments (8): also 16. ZeRO stage 1 divides the optimizer
state by the data-parallel size d, stage 2 the gradients too, stage 3 the weights too.
ZeRO-Offload (Ren et al., USENIX ATC'21) keeps the optimizer state, and with stage ≥ 2 the
gradient partition, in host memory: they leave the GPU.

Activations (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", MLSys'23, §4, Table 2), bytes per layer per micro-batch of b sequences, with t the
tensor-parallel size and a the heads:

==============================================  ==================================
no recomputation, tensor parallel               sbh·(10 + 24/t + 5as/(ht))
no recomputation, tensor + sequence parallel    sbh·(34/t + 5as/(ht))
selective recomputation, tensor parallel        sbh·(10 + 24/t)
selective recomputation, tensor + sequence      sbh·34/t
full recomputation                              2sbh (2sbh/t with sequence parallel)
==============================================  ==================================

(t = 1 gives the paper's unparallelised sbh(34 + 5as/h).) The formulas assume 2-byte
activations and the GPT layer (4h MLP, multi-head attention); for other shapes the code counts
the same tensors with their own widths (a gated MLP stores its gate and up projections, grouped-
query attention stores fewer K and V heads), which reduces to the table for GPT.

Pipeline in-flight micro-batches (Korthikanti et al. §4.2.3; Narayanan et al. 2021 §2.2): the
first stage of a 1F1B schedule holds the activations of p micro-batches (its l/p layers each), a
GPipe schedule all m, the interleaved schedule with v chunks p·(1 + (p−1)/(p·v)).
"""

from __future__ import annotations

from dataclasses import dataclass

from apportion.perf.transformer import TransformerModel

GB = 1e9


def state_bytes_per_param(precision: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter for Adam at ``precision``.

    fp8 is Transformer Engine's recipe: bf16 weights and gradients, fp32 master weights and
    moments, and an fp8 copy of every weight with its transpose (Hopper's FP8 products take the
    transposed layout for the backward): 2 + 2 + 2 bytes of weights.
    """
    if precision == "fp8":
        return 4, 2, 12
    if precision in ("fp16", "bf16"):
        return 2, 2, 12
    if precision in ("fp32", "tf32"):
        return 4, 4, 8
    raise ValueError(f"precision must be one of fp32, tf32, fp16, bf16, fp8, got {precision!r}")


@dataclass(frozen=True)
class ModelStates:
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def model_state_bytes(params: float, precision: str, zero: int = 0, dp: int = 1, offload: bool = False) -> ModelStates:
    """Bytes on one GPU for ``params`` parameters (its tensor/pipeline shard), Adam, ZeRO stage ``zero``."""
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero}")
    w, g, o = state_bytes_per_param(precision)
    weights = params * w / (dp if zero >= 3 else 1)
    gradients = params * g / (dp if zero >= 2 else 1)
    optimizer = params * o / (dp if zero >= 1 else 1)
    if offload:
        optimizer = 0.0
        if zero >= 2:
            gradients = 0.0
    return ModelStates(weights, gradients, optimizer)


def _layer_tensors(model: TransformerModel, micro_batch: int, tp: int, sequence_parallel: bool,
                   act_bytes: int = 2, flash: bool = False, expert_slots: float = 1.0,
                   gemm_input_bytes: int | None = None) -> tuple[float, float, float]:
    """(replicated, split, attention-core) activation bytes of one layer, one micro-batch.

    ``replicated``: tensors every tensor-parallel rank holds whole unless sequence parallelism
    splits them (LayerNorm inputs, the inputs of QKV and FC1, dropout masks after the
    projection and FC2): 10·sbh in Korthikanti's count. ``split``: tensors divided by t (Q, K,
    V, the projection's input, the MLP's inner activations): 24·sbh/t for GPT. ``attention``:
    the softmax output, its dropout mask and dropout output, 5·as²b/t, which selective
    recomputation drops. Bytes for ``act_bytes`` = 2 (fp16/bf16) activations; masks 1 byte.
    A fused (flash) attention keeps no s × s tensor: only the softmax's log-sum-exp, 4 bytes
    per query and head. A mixture-of-experts MLP keeps its tensors for ``expert_slots`` = c·k
    copies of every token, plus the tokens permuted into expert order and the router's fp32
    probabilities. With fp8 products the inputs of QKV, the projection, FC1 and FC2 are kept at
    ``gemm_input_bytes`` (their fp8 casts), everything else in bf16.
    """
    s, b, h = model.seq, micro_batch, model.hidden
    sbh = s * b * h
    e = act_bytes
    g = e if gemm_input_bytes is None else gemm_input_bytes
    d = model.head_dim
    # attention: QKV input (e·sbh), Q and K (e·sb·(heads + kv)·d), V (e·sb·kv·d), proj input (e·sbh),
    # dropout mask after proj (sbh); MLP: FC1 input (e·sbh), activation input and output
    # (2·e·sb·ffn, plus the gate for a gated MLP), dropout mask (sbh); two LayerNorm inputs (2·e·sbh).
    replicated = (g + 1 + g + 1 + 2 * e) * sbh  # = 10 sbh for e = 2
    split = e * s * b * ((model.heads + model.kv) * d + model.kv * d) + g * sbh
    split += expert_slots * s * b * (e * model.mlp_in_width + g * model.ffn)
    if model.is_moe:
        split += expert_slots * g * sbh * tp  # the permuted tokens, whole on every tensor-parallel rank
        replicated += 4 * s * b * model.experts  # router probabilities
    attention = (e + 1 + e) * model.heads * s * s * b  # softmax out, dropout mask, dropout out
    if flash:
        attention = 4 * model.heads * s * b
    split /= tp
    attention /= tp
    if sequence_parallel:
        replicated /= tp
    return replicated, split, attention


def layer_activation_bytes(model: TransformerModel, micro_batch: int, tp: int = 1, recompute: str = "none",
                           sequence_parallel: bool = False, act_bytes: int = 2, flash: bool = False,
                           expert_slots: float = 1.0, gemm_input_bytes: int | None = None) -> float:
    """Activation bytes one layer keeps for backward, per micro-batch (Korthikanti et al. Table 2)."""
    if recompute == "full":
        return act_bytes * model.seq * micro_batch * model.hidden / (tp if sequence_parallel else 1)
    replicated, split, attention = _layer_tensors(model, micro_batch, tp, sequence_parallel, act_bytes, flash,
                                                  expert_slots, gemm_input_bytes)
    if recompute == "selective":
        return replicated + split
    if recompute == "none":
        return replicated + split + attention
    raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")


def layer_working_bytes(model: TransformerModel, micro_batch: int, tp: int = 1, sequence_parallel: bool = False,
                        act_bytes: int = 2, flash: bool = False, expert_slots: float = 1.0,
                        gemm_input_bytes: int | None = None) -> float:
    """Everything one layer materialises for one micro-batch (held while that layer's backward runs)."""
    return sum(_layer_tensors(model, micro_batch, tp, sequence_parallel, act_bytes, flash, expert_slots,
                              gemm_input_bytes))


def in_flight_microbatches(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Micro-batches whose activations the first pipeline stage holds at its peak."""
    if pp <= 1 or schedule == "none":
        return 1.0
    if schedule == "gpipe":
        return float(microbatches)
    if schedule == "1f1b":
        return float(min(pp, microbatches))
    if schedule == "interleaved":
        return min(pp * (1 + (pp - 1) / (pp * virtual_stages)), float(microbatches))
    raise ValueError(f"unknown pipeline schedule {schedule!r}")


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded GPU."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float = 0.0  # beyond the model: CUDA context, communication buffers, fragmentation

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    def as_gb(self) -> dict[str, float]:
        return {"weights": self.weights / GB, "gradients": self.gradients / GB, "optimizer": self.optimizer / GB,
                "activations": self.activations / GB, "other": self.other / GB, "total": self.total / GB}
