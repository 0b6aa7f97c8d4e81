"""Find the fastest layouts that fit: PipeDream-2BW's planner idea over Megatron-LM's layout space.

Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training" (PipeDream-2BW, ICML'21),
§3.3: enumerate the ways to split a model (pipeline depth, data-parallel width, micro-batch
size, recomputation), keep those whose memory fits the accelerator, and pick the highest
predicted throughput. Here the space is:

* tensor-parallel size t: divisors of the GPUs per node (so a tensor-parallel group stays on
  NVLink) that divide the attention heads;
* pipeline size p: every p up to the layer count with t·p dividing the GPUs; d = GPUs / (t·p),
  and the global batch must divide by d. Stages that divide the layers get an even split; others
  the split that balances the stages' times, the embedding on the first stage and the output
  layer and loss on the last (``step.balanced_stage_layers``; BLOOM-176B put 70 layers on 12
  stages, Llama 3 405B 126 on 16). ``stage_layers`` pins a split of one's own;
* micro-batch b: divisors of B/d up to ``max_micro_batch``;
* recomputation: none, selective, full; sequence parallelism on or off when t > 1;
* ZeRO stage 0–3 (2 and 3 only without pipelining or expert parallelism), ZeRO-Offload only
  when asked;
* for a mixture of experts, the expert-parallel size: every divisor of both the experts and d;
* schedule when p > 1: 1F1B, interleaved 1F1B with every v ≥ 2 dividing each stage's layers
  (m a multiple of p; only for even or pinned splits), and GPipe.

Any of these can be pinned; the rest is searched. Layouts are ranked by predicted step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from math import gcd

from apportion.perf.accelerators import Accelerator, get_accelerator
from apportion.perf.parallel import SCHEDULES, Layout, even_stage_layers, layout_problems
from apportion.perf.software import SoftwareProfile
from apportion.perf.step import Prediction, predict
from apportion.perf.transformer import RECOMPUTE_MODES, TransformerModel


def _divisors(n: int, most: int | None = None) -> list[int]:
    """The divisors of ``n`` up to ``most`` (None: all), in order; the work grows with ``most``, not ``n``."""
    return [k for k in range(1, (n if most is None else min(n, most)) + 1) if n % k == 0]


@dataclass
class Rejected:
    layout: Layout
    reasons: list[str]
    prediction: Prediction | None = None  # set when the layout is valid but does not fit


@dataclass
class Plan:
    """The best layouts (fastest first) and the ones turned away, with why."""

    model: TransformerModel
    accelerator: str
    gpus: int
    global_batch: int
    best: list[Prediction]
    rejected: list[Rejected] = field(default_factory=list)
    considered: int = 0

    def rejection_counts(self) -> dict[str, int]:
        """How many layouts each reason rejected, most frequent first."""
        counts: dict[str, int] = {}
        for r in self.rejected:
            key = r.reasons[0] if r.reasons else "unknown"
            if r.prediction is not None:
                key = "does not fit in memory"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def rejection_summary(self, limit: int = 5) -> list[str]:
        """The most common reasons, most frequent first, with a count."""
        return [f"{n} × {reason}" for reason, n in list(self.rejection_counts().items())[:limit]]

    def closest_misses(self, limit: int = 3) -> list[Rejected]:
        """Valid layouts that do not fit, least memory first."""
        misses = [r for r in self.rejected if r.prediction is not None]
        return sorted(misses, key=lambda r: r.prediction.memory.total)[:limit]


def plan(model: TransformerModel, gpus: int, accelerator: Accelerator | str, global_batch: int, *,
         top: int = 5, tp: int | None = None, pp: int | None = None, micro_batch: int | None = None,
         recompute: str | None = None, sequence_parallel: bool | None = None, zero: int | None = None,
         offload: bool = False, schedule: str | None = None, virtual_stages: int | None = None,
         precision: str | None = None, overlap_grad_reduce: bool = True, max_micro_batch: int = 32,
         keep_rejected: bool = True, stage_layers: tuple[int, ...] | None = None,
         software: SoftwareProfile | None = None, ep: int | None = None,
         capacity_factor: float | None = None) -> Plan:
    """Search the layout space for ``model`` on ``gpus`` GPUs of ``accelerator`` as ``software`` runs it
    (default: the hardware model); pinned options stay fixed."""
    acc = get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    if gpus < 1:
        raise ValueError(f"the number of GPUs must be positive, got {gpus}")
    if global_batch < 1:
        raise ValueError(f"the global batch must be positive, got {global_batch}")
    if recompute is not None and recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    precision = precision or default_precision(acc)

    if stage_layers is not None:
        stage_layers = tuple(stage_layers)
        if pp is not None and pp != len(stage_layers):
            raise ValueError(f"stage layers name {len(stage_layers)} stages but the pipeline-parallel size is {pp}")
        pp = len(stage_layers)
    tps = [tp] if tp is not None else [t for t in _divisors(acc.gpus_per_node) if model.heads % t == 0]
    pps = [pp] if pp is not None else [q for q in range(1, model.layers + 1) if gpus % q == 0]
    recomputes = [recompute] if recompute is not None else list(RECOMPUTE_MODES)
    zeros = [zero] if zero is not None else [0, 1, 2, 3]

    result = Plan(model, acc.name, gpus, global_batch, [])
    fitting: list[Prediction] = []
    explicit_problems: list[Rejected] = []
    for t in tps:
        for p in pps:
            if gpus % (t * p):
                if tp is not None and pp is not None:
                    explicit_problems.append(Rejected(Layout(tp=t, pp=p, dp=1, global_batch=global_batch),
                                                      [f"{gpus} GPUs are not divisible by tensor × pipeline "
                                                       f"parallel size ({t} × {p} = {t * p})"]))
                continue
            d = gpus // (t * p)
            if global_batch % d:
                explicit_problems.append(Rejected(Layout(tp=t, pp=p, dp=d, global_batch=global_batch),
                                                  [f"global batch {global_batch} is not divisible by the "
                                                   f"data-parallel size {d}"]))
                continue
            per_replica = global_batch // d
            bs = [micro_batch] if micro_batch is not None else _divisors(per_replica, most=max_micro_batch)
            if p == 1:
                schedules = [("none", 1)] if schedule in (None, "none", "1f1b") else [(schedule, virtual_stages or 1)]
            else:
                names = [schedule] if schedule not in (None, "none") else ["1f1b", "interleaved", "gpipe"]
                schedules = []
                counts = stage_layers or even_stage_layers(model.layers, p)
                for name in names:
                    if name == "interleaved":
                        if virtual_stages:
                            vs = [virtual_stages]
                        elif counts is not None:
                            vs = [v for v in _divisors(gcd(*counts)) if v >= 2]
                        else:
                            vs = []  # a balanced split is chosen per layout; interleave it by pinning it
                        schedules += [("interleaved", v) for v in vs]
                    else:
                        schedules.append((name, 1))
            sps = [sequence_parallel] if sequence_parallel is not None else ([False, True] if t > 1 else [False])
            if ep is not None:
                eps = [ep]
            else:
                eps = [e for e in _divisors(gcd(model.experts, d))] if model.is_moe else [1]
            for b in bs:
                for rc in recomputes:
                    for sp in sps:
                        for z, e, (sched, v) in product(zeros, eps, schedules):
                            if z >= 2 and (p > 1 or e > 1) and zero is None:
                                continue  # not a combination anyone runs (see layout_problems)
                            layout = Layout(tp=t, pp=p, dp=d, micro_batch=b, global_batch=global_batch,
                                            recompute=rc, sequence_parallel=sp, zero=z,
                                            offload=offload and z > 0, schedule=sched, virtual_stages=v,
                                            overlap_grad_reduce=overlap_grad_reduce, precision=precision,
                                            stage_layers=stage_layers, ep=e, capacity_factor=capacity_factor)
                            result.considered += 1
                            problems = layout_problems(model, layout)
                            if problems:
                                if keep_rejected:
                                    result.rejected.append(Rejected(layout, problems))
                                continue
                            prediction = predict(model, layout, acc, software)
                            if prediction.fits:
                                fitting.append(prediction)
                            elif keep_rejected:
                                result.rejected.append(Rejected(layout, prediction.reasons, prediction))
    result.rejected = explicit_problems + result.rejected
    fitting.sort(key=lambda x: (x.step_time_s, x.memory.total))
    result.best = fitting[:top]
    return result


def default_precision(acc: Accelerator) -> str:
    """bf16 where the GPU has bf16 tensor cores, else fp16 where it has fp16 units, else fp32."""
    if "bf16" in acc.peak_flops:
        return "bf16"
    if "fp16" in acc.peak_flops:
        return "fp16"
    return "fp32"


def fixed_layout(gpus: int, accelerator: Accelerator | str, global_batch: int, tp: int, pp: int, micro_batch: int, *,
                 recompute: str | None = None, sequence_parallel: bool | None = None, zero: int | None = None,
                 offload: bool = False, schedule: str | None = None, virtual_stages: int | None = None,
                 precision: str | None = None, overlap_grad_reduce: bool = True,
                 stage_layers: tuple[int, ...] | None = None, ep: int | None = None,
                 capacity_factor: float | None = None) -> Layout:
    """The one layout ``tp``·``pp``·(``gpus``/tp·pp) with what is not given at its default: no
    recomputation, no ZeRO, 1F1B (interleaved with virtual stages, none without a pipeline), the
    GPU's best precision. ValueError when tp·pp does not divide the GPUs."""
    acc = get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    if gpus % (tp * pp):
        raise ValueError(f"{gpus} GPUs are not divisible by tensor × pipeline-parallel size ({tp} × {pp} = {tp * pp})")
    if schedule is None:
        schedule = "interleaved" if (virtual_stages or 1) > 1 else ("1f1b" if pp > 1 else "none")
    return Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=micro_batch, global_batch=global_batch,
                  recompute=recompute or "none", sequence_parallel=bool(sequence_parallel), zero=zero or 0,
                  offload=offload, schedule=schedule, virtual_stages=virtual_stages or 1,
                  overlap_grad_reduce=overlap_grad_reduce, precision=precision or default_precision(acc),
                  stage_layers=stage_layers, ep=ep or 1, capacity_factor=capacity_factor)
