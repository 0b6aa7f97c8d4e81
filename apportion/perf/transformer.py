"""A transformer's shape, its parameter count and its FLOPs per training iteration.

The counts follow Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC'21, arXiv 2104.04473), Section 5.1 and Appendix: a GPT layer
holds ``12h² + 13h`` parameters (QKV, projection and the two MLP matrices with their biases,
two LayerNorms), the embeddings ``(V + s)h`` (tied input/output word embedding plus learned
positions); the final LayerNorm's ``2h`` is left out, as in the paper's Eq. 2. A forward pass
over ``B`` sequences of length ``s`` costs ``24Bsh² + 4Bs²h`` GEMM FLOPs per layer and
``2BshV`` for the logits. Training multiplies the layers by 3 (forward + backward, the
backward costing twice the forward) and by 4 with full recomputation (one more forward),
the logits by 3: with full recomputation that is exactly the paper's Eq. 3,
``96Bslh²(1 + s/(6h) + V/(16lh))``; without recomputation the factor is 72.

Llama-like shapes (gated MLP, grouped-query attention, untied output layer, rotary positions,
no biases) and BERT-like encoders use the same per-GEMM accounting with their own matrix
sizes; for the GPT family the general code reduces to the paper's formulas exactly (the tests
check it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from apportion.perf.roofline import Gemm

RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class TransformerModel:
    """A decoder (GPT, Llama) or encoder (BERT) stack of identical layers."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn_hidden: int | None = None  # default 4·hidden
    kv_heads: int | None = None  # grouped-query attention; default = heads
    gated_mlp: bool = False  # SwiGLU: two input matrices (gate, up) and one output matrix
    tied_embeddings: bool = True  # the output layer reuses the input word embedding
    learned_positions: bool = True  # a (seq × hidden) position table; False for rotary
    bias: bool = True  # linear layers and LayerNorms carry biases
    family: str = "gpt"
    experts: int = 1  # mixture of experts: MLPs per layer (1: a dense model)
    top_k: int = 1  # experts each token is routed to

    def __post_init__(self) -> None:
        for field_name in ("layers", "hidden", "heads", "seq", "vocab"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field_name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden size {self.hidden} is not divisible by the {self.heads} attention heads")
        if self.ffn_hidden is not None and self.ffn_hidden <= 0:
            raise ValueError(f"ffn_hidden must be positive, got {self.ffn_hidden}")
        if self.kv_heads is not None and (self.kv_heads <= 0 or self.heads % self.kv_heads):
            raise ValueError(f"attention heads {self.heads} are not divisible by kv_heads {self.kv_heads}")
        if not isinstance(self.experts, int) or self.experts < 1:
            raise ValueError(f"experts must be a positive integer, got {self.experts!r}")
        if not isinstance(self.top_k, int) or not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be between 1 and the {self.experts} experts, got {self.top_k!r}")

    @property
    def ffn(self) -> int:
        return self.ffn_hidden if self.ffn_hidden is not None else 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_width(self) -> int:
        """Output width of the fused QKV projection: queries for every head, keys and values per kv head."""
        return (self.heads + 2 * self.kv) * self.head_dim

    @property
    def mlp_in_width(self) -> int:
        return 2 * self.ffn if self.gated_mlp else self.ffn

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def causal(self) -> bool:
        """Decoders (GPT, Llama) mask attention causally; encoders (BERT) use a padding mask."""
        return self.family != "bert"

    def with_(self, **changes) -> "TransformerModel":
        return replace(self, **changes)


# ---------------------------------------------------------------------------------------------
# parameters


def expert_parameters(model: TransformerModel) -> int:
    """Parameters of one MLP (one expert of a mixture-of-experts layer), biases included."""
    h = model.hidden
    return h * model.mlp_in_width + model.ffn * h + ((model.mlp_in_width + h) if model.bias else 0)


def layer_parameters(model: TransformerModel, experts: int | None = None) -> int:
    """Parameters of one transformer layer (weights, biases, two norms; every expert and the
    router of a mixture-of-experts layer, or ``experts`` of them)."""
    h = model.hidden
    attention = h * model.qkv_width + h * h + ((model.qkv_width + h) if model.bias else 0)
    router = h * model.experts if model.is_moe else 0
    norms = 4 * h if model.bias else 2 * h  # LayerNorms scale and shift; RMSNorm scales only
    n = model.experts if experts is None else experts
    return attention + router + norms + n * expert_parameters(model)


def embedding_parameters(model: TransformerModel) -> int:
    """Word embedding (and an untied output layer) plus learned positions."""
    words = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    positions = model.seq * model.hidden if model.learned_positions else 0
    return words + positions


def parameter_count(model: TransformerModel) -> int:
    """Eq. 2's accounting: layers plus embeddings (the final norm's 2h is not counted, as in the paper)."""
    return model.layers * layer_parameters(model) + embedding_parameters(model)


def active_parameter_count(model: TransformerModel) -> int:
    """Parameters one token passes through: a mixture-of-experts layer counts its top-k experts."""
    return model.layers * layer_parameters(model, model.top_k) + embedding_parameters(model)


def paper_parameter_count(layers: int, hidden: int, vocab: int, seq: int):
    """Eq. 2 of Narayanan et al. 2021, evaluated exactly (a ``fractions.Fraction``)."""
    from fractions import Fraction

    l, h, V, s = (Fraction(x) for x in (layers, hidden, vocab, seq))
    return 12 * l * h**2 * (1 + Fraction(13) / (12 * h) + (V + s) / (12 * l * h))


# ---------------------------------------------------------------------------------------------
# GEMM FLOPs


def layer_forward_flops(model: TransformerModel, sequences: int) -> int:
    """GEMM FLOPs of one layer's forward pass over ``sequences`` sequences (24Bsh² + 4Bs²h for GPT;
    a mixture-of-experts layer runs each token through its top-k experts and the router)."""
    s, h = model.seq, model.hidden
    tokens = sequences * s
    linear = 2 * tokens * h * (model.qkv_width + h + model.top_k * (model.mlp_in_width + model.ffn))
    if model.is_moe:
        linear += 2 * tokens * h * model.experts  # the router
    attention = 2 * 2 * sequences * s * s * h  # QKᵀ and (scores · V), every head
    return linear + attention


def attention_core_forward_flops(model: TransformerModel, sequences: int) -> int:
    """The part selective recomputation repeats: QKᵀ and scores·V (4Bs²h)."""
    return 4 * sequences * model.seq * model.seq * model.hidden


def logits_forward_flops(model: TransformerModel, sequences: int) -> int:
    return 2 * sequences * model.seq * model.hidden * model.vocab


def iteration_flops(model: TransformerModel, global_batch: int, recompute: str = "full") -> int:
    """GEMM FLOPs of one training iteration, counting recomputed forwards (hardware FLOPs).

    ``full``: 4 × layer forward + 3 × logits (= Eq. 3); ``selective``: 3 × layer forward plus the
    attention core once more; ``none``: 3 × (layers + logits) (the 72 factor).
    """
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    layer = layer_forward_flops(model, global_batch)
    passes = {"none": 3, "selective": 3, "full": 4}[recompute]
    total = model.layers * passes * layer + 3 * logits_forward_flops(model, global_batch)
    if recompute == "selective":
        total += model.layers * attention_core_forward_flops(model, global_batch)
    return total


def model_flops(model: TransformerModel, global_batch: int) -> int:
    """FLOPs of forward + backward without any recomputation (the basis of model FLOPs utilisation)."""
    return iteration_flops(model, global_batch, "none")


def paper_iteration_flops(global_batch: int, seq: int, layers: int, hidden: int, vocab: int,
                          recompute: bool = True):
    """Eq. 3 of Narayanan et al. 2021 (96 factor; 72 without recomputation), exactly (a Fraction)."""
    from fractions import Fraction

    B, s, l, h, V = (Fraction(x) for x in (global_batch, seq, layers, hidden, vocab))
    if recompute:
        return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    return 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


# ---------------------------------------------------------------------------------------------
# per-layer GEMM shapes


def _split(value: int, parts: int) -> int:
    return max(1, -(-value // parts))


def expert_tokens(model: TransformerModel, micro_batch: int, ep: int = 1,
                  capacity_factor: float | None = None) -> int:
    """Token slots each expert on a GPU computes per micro-batch: ``c·k·T·ep/E`` for T = b·s
    tokens on each of the ``ep`` GPUs that share the experts, k experts a token and capacity
    factor c (GShard, Switch: a full expert drops what is over; None: dropless, c = 1, as with
    MegaBlocks, on a balanced load)."""
    c = capacity_factor if capacity_factor is not None else 1.0
    return max(1, ceil(c * model.top_k * micro_batch * model.seq * ep / model.experts))


def layer_gemms(model: TransformerModel, micro_batch: int, tp: int, ep: int = 1,
                capacity_factor: float | None = None) -> list[Gemm]:
    """Forward GEMMs of one layer on one tensor-parallel rank (Megatron's column/row split).

    QKV and the MLP's first matrix are split by columns, the projection and the MLP's second
    matrix by rows; attention heads are divided among the ``tp`` ranks. Tokens are ``b·s``. A
    mixture-of-experts layer has a router (tokens × experts) and runs its E/ep local experts as
    one grouped product each for FC1 and FC2, over :func:`expert_tokens` rows.
    """
    s, h, d = model.seq, model.hidden, model.head_dim
    tokens = micro_batch * s
    heads = _split(model.heads, tp)
    gemms = [
        Gemm(tokens, _split(model.qkv_width, tp), h, name="qkv"),
        Gemm(s, s, d, micro_batch * heads, name="scores"),
        Gemm(s, d, s, micro_batch * heads, name="context"),
        Gemm(tokens, h, _split(h, tp), name="proj"),
    ]
    if not model.is_moe:
        return gemms + [Gemm(tokens, _split(model.mlp_in_width, tp), h, name="fc1"),
                        Gemm(tokens, h, _split(model.ffn, tp), name="fc2")]
    rows, local = expert_tokens(model, micro_batch, ep, capacity_factor), model.experts // ep
    return gemms + [Gemm(tokens, model.experts, h, name="router"),
                    Gemm(rows, _split(model.mlp_in_width, tp), h, local, name="fc1"),
                    Gemm(rows, h, _split(model.ffn, tp), local, name="fc2")]


def logits_gemm(model: TransformerModel, micro_batch: int, tp: int) -> Gemm:
    return Gemm(micro_batch * model.seq, _split(model.vocab, tp), model.hidden, name="logits")


# ---------------------------------------------------------------------------------------------
# presets

_GPT = dict(seq=2048, vocab=51200, family="gpt")
_LLAMA = dict(vocab=32000, gated_mlp=True, tied_embeddings=False, learned_positions=False, bias=False,
              family="llama")
_BERT = dict(seq=512, vocab=30528, family="bert")

PRESETS: dict[str, TransformerModel] = {
    m.name: m
    for m in (
        # GPT-3 (Brown et al. 2020, Table 2.1), with Megatron's padded GPT-2 vocabulary of 51,200
        TransformerModel("gpt3-125m", layers=12, hidden=768, heads=12, **_GPT),
        TransformerModel("gpt3-350m", layers=24, hidden=1024, heads=16, **_GPT),
        TransformerModel("gpt3-1.3b", layers=24, hidden=2048, heads=16, **_GPT),
        TransformerModel("gpt3-2.7b", layers=32, hidden=2560, heads=32, **_GPT),
        TransformerModel("gpt3-6.7b", layers=32, hidden=4096, heads=32, **_GPT),
        TransformerModel("gpt3-13b", layers=40, hidden=5120, heads=40, **_GPT),
        TransformerModel("gpt3-175b", layers=96, hidden=12288, heads=96, **_GPT),
        # Megatron-LM's trillion-parameter GPT (Narayanan et al. 2021, Table 1, last row)
        TransformerModel("megatron-1t", layers=128, hidden=25600, heads=160, **_GPT),
        # Llama-like (Touvron et al. 2023, Llama 1 7B/13B and Llama 2 70B shapes)
        TransformerModel("llama-7b-like", layers=32, hidden=4096, heads=32, seq=2048, ffn_hidden=11008, **_LLAMA),
        TransformerModel("llama-13b-like", layers=40, hidden=5120, heads=40, seq=2048, ffn_hidden=13824, **_LLAMA),
        TransformerModel("llama-70b-like", layers=80, hidden=8192, heads=64, kv_heads=8, seq=4096,
                         ffn_hidden=28672, **_LLAMA),
        # Llama 3 8B and 70B (Llama Team, "The Llama 3 Herd of Models", 2024, Table 3): 8 key/value heads,
        # vocabulary 128,256, sequence 8,192
        TransformerModel("llama3-8b-like", layers=32, hidden=4096, heads=32, kv_heads=8, seq=8192,
                         ffn_hidden=14336, **{**_LLAMA, "vocab": 128256}),
        TransformerModel("llama3-70b-like", layers=80, hidden=8192, heads=64, kv_heads=8, seq=8192,
                         ffn_hidden=28672, **{**_LLAMA, "vocab": 128256}),
        # Llama 3 405B (Llama Team, "The Llama 3 Herd of Models", 2024, Table 3): 126 layers, 128 heads
        # with 8 key/value heads, MLP 53,248, vocabulary 128,256, sequence 8,192
        TransformerModel("llama3-405b-like", layers=126, hidden=16384, heads=128, kv_heads=8, seq=8192,
                         ffn_hidden=53248, **{**_LLAMA, "vocab": 128256}),
        # BLOOM-176B (BigScience, arXiv 2211.05100, Table 3): 70 layers, 112 heads, vocabulary 250,880,
        # ALiBi instead of learned positions, tied embeddings, GeLU MLP of 4h (embedding LayerNorm not counted)
        TransformerModel("bloom-176b", layers=70, hidden=14336, heads=112, seq=2048, vocab=250880,
                         learned_positions=False, family="gpt"),
        # Mixtral 8x7B (Jiang et al. 2024, arXiv 2401.04088, Table 1): Mistral 7B's shape with 8 SwiGLU
        # experts of 14,336 per layer, 2 per token; 32 heads with 8 key/value heads, vocabulary 32,000
        TransformerModel("mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, seq=4096,
                         ffn_hidden=14336, experts=8, top_k=2, **_LLAMA),
        # BERT (Devlin et al. 2019), vocabulary 30,522 padded to a multiple of 64
        TransformerModel("bert-base", layers=12, hidden=768, heads=12, **_BERT),
        TransformerModel("bert-large", layers=24, hidden=1024, heads=16, **_BERT),
    )
}

FAMILY_DEFAULTS: dict[str, dict] = {"gpt": _GPT, "llama": {**_LLAMA, "seq": 2048}, "bert": _BERT}


def llama_ffn(hidden: int, multiple_of: int = 256) -> int:
    """Llama's MLP width: 2/3 of 4h, rounded up to a multiple of 256 (11008 for h = 4096)."""
    return multiple_of * -(-(8 * hidden // 3) // multiple_of)


def build_model(family: str = "gpt", preset: str | None = None, *, layers: int | None = None,
                hidden: int | None = None, heads: int | None = None, seq: int | None = None,
                vocab: int | None = None, ffn_hidden: int | None = None, kv_heads: int | None = None,
                name: str | None = None, experts: int | None = None, top_k: int | None = None) -> TransformerModel:
    """A model from a preset and/or explicit sizes; explicit sizes override the preset's."""
    if preset is not None:
        base = get_preset(preset)
        changes = {k: v for k, v in dict(layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab,
                                          ffn_hidden=ffn_hidden, kv_heads=kv_heads, experts=experts,
                                          top_k=top_k).items() if v is not None}
        if changes:
            changes["name"] = name or base.name + "-custom"
            if "hidden" in changes and "ffn_hidden" not in changes and base.ffn_hidden is not None:
                changes["ffn_hidden"] = llama_ffn(changes["hidden"]) if base.gated_mlp else None
        elif name:
            changes["name"] = name
        return replace(base, **changes)
    family = family.lower()
    if family not in FAMILY_DEFAULTS:
        raise ValueError(f"unknown model family '{family}' (known: {', '.join(FAMILY_DEFAULTS)})")
    missing = [opt for opt, v in (("--layers", layers), ("--hidden", hidden), ("--heads", heads)) if v is None]
    if missing:
        raise ValueError(f"give --preset NAME or all of --layers, --hidden and --heads (missing {', '.join(missing)})")
    defaults = dict(FAMILY_DEFAULTS[family])
    if seq is not None:
        defaults["seq"] = seq
    if vocab is not None:
        defaults["vocab"] = vocab
    if ffn_hidden is None and family == "llama":
        ffn_hidden = llama_ffn(hidden)
    moe = {k: v for k, v in dict(experts=experts, top_k=top_k).items() if v is not None}
    return TransformerModel(name or f"{family}-{layers}x{hidden}", layers=layers, hidden=hidden, heads=heads,
                            ffn_hidden=ffn_hidden, kv_heads=kv_heads, **defaults, **moe)


def get_preset(name: str) -> TransformerModel:
    """The preset called ``name``; unknown names list the known ones."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model preset '{name}' (known: {', '.join(PRESETS)})") from None
