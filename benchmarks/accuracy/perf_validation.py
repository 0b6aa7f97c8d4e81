"""Check apportion.perf against Table 1 of Narayanan et al. 2021 (Megatron-LM, SC'21).

For each of the ten rows the model gets only what the row states, what the hardware is, and
how the authors ran it: layers, hidden size, heads, tensor/pipeline/data-parallel sizes, global
batch, sequence 2,048, vocabulary 51,200, full activation recomputation, fp16, on the catalog's
a100-80gb (Selene: DGX A100 80 GB, 8 GPUs and 8 HDR adapters per node). The paper's table does
not give the micro-batch size, the interleaving degree or the data-parallel implementation, but
the authors published the scripts that produced it: NVIDIA/Megatron-LM, examples/sc21/
run_table_1.sh (with CONFIG.sh: ``--fp16``, no fp32 gradient accumulation; SRUN.sh: container
nvcr.io/nvidia/pytorch:20.12-py3). Per row they set MBS (the micro-batch b), ``--num-layers-per-
virtual-pipeline-stage`` (v = l/p divided by it; rows without it run the plain 1F1B schedule)
and ``--DDP-impl``: ``torch`` (PyTorch DDP, whose bucketed all-reduce overlaps the last backward)
for the four rows without pipelining, ``local`` (Megatron's DDP, which all-reduces the fp16
gradients after the whole backward pass) for the rest. ``--search`` instead lets the planner
pick b (dividing B/d, up to 32) and v (≥ 2, dividing l/p) as the fastest that fit, with local
DDP everywhere (what this script did before those scripts were found).

Then it checks the model's parameter count and FLOPs per iteration against the paper's Eq. 2
and Eq. 3 exactly (rational arithmetic), for every row.

    python benchmarks/accuracy/perf_validation.py            # table, MAPE, worst row, formula checks
    python benchmarks/accuracy/perf_validation.py --json     # the same figures as JSON
    python benchmarks/accuracy/perf_validation.py --search   # planner-chosen b and v instead of the published ones
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from apportion.perf import Layout, TransformerModel, get_accelerator, iteration_flops, parameter_count, plan, predict
from apportion.perf.transformer import paper_iteration_flops, paper_parameter_count

TABLE = Path(__file__).resolve().parents[2].parent / "shared" / "validation" / "megatron_ptdp_table1.csv"
SEQ, VOCAB = 2048, 51200

# NVIDIA/Megatron-LM examples/sc21/run_table_1.sh, per row (keyed by the table's parameter count):
# (MBS, --DDP-impl, --num-layers-per-virtual-pipeline-stage or None for the non-interleaved 1F1B).
PUBLISHED_RUNS: dict[str, tuple[int, str, int | None]] = {
    "1.7": (16, "torch", None),
    "3.6": (16, "torch", None),
    "7.5": (16, "torch", None),
    "18.4": (8, "torch", None),
    "39.1": (4, "local", None),
    "76.1": (2, "local", 5),
    "145.6": (2, "local", 5),
    "310.1": (1, "local", 3),
    "529.6": (1, "local", 1),
    "1008.0": (1, "local", None),
}


def rows(path: Path = TABLE) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def predict_row(row: dict, accelerator: str = "a100-80gb", search: bool = False):
    l, h, a = int(row["layers"]), int(row["hidden_size"]), int(row["attention_heads"])
    t, p, d, B = (int(row[k]) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "global_batch"))
    model = TransformerModel(f"gpt-{row['params_billion']}b", layers=l, hidden=h, heads=a, seq=SEQ, vocab=VOCAB)
    if search:
        result = plan(model, t * p * d, accelerator, B, top=1, tp=t, pp=p, recompute="full", sequence_parallel=False,
                      zero=0, schedule="interleaved" if p > 1 else "none", precision="fp16",
                      overlap_grad_reduce=False, keep_rejected=False)
        return model, (result.best[0] if result.best else None), "local"
    b, ddp, layers_per_chunk = PUBLISHED_RUNS[row["params_billion"]]
    v = (l // p) // layers_per_chunk if layers_per_chunk else 1
    schedule = "none" if p == 1 else ("interleaved" if v > 1 else "1f1b")
    layout = Layout(tp=t, pp=p, dp=d, micro_batch=b, global_batch=B, recompute="full", sequence_parallel=False,
                    zero=0, schedule=schedule, virtual_stages=v, overlap_grad_reduce=(ddp == "torch"),
                    precision="fp16")
    prediction = predict(model, layout, accelerator)
    return model, (prediction if prediction.fits else None), ddp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--gpu-type", default="a100-80gb")
    parser.add_argument("--search", action="store_true",
                        help="let the planner choose micro-batch and interleaving (local DDP) instead of the published runs")
    parser.add_argument("--quick", action="store_true",
                        help="the same figures (they take seconds): the test suite runs it")
    args = parser.parse_args()
    if not TABLE.exists():
        print(f"validation table not found at {TABLE}", file=sys.stderr)
        return 1
    acc = get_accelerator(args.gpu_type)

    out = []
    for row in rows():
        model, best, ddp = predict_row(row, acc.name, args.search)
        published = float(row["tflops_per_gpu"])
        entry = {"params_billion": float(row["params_billion"]), "tp": int(row["tensor_parallel"]),
                 "pp": int(row["pipeline_parallel"]), "dp": int(row["data_parallel"]), "gpus": int(row["gpus"]),
                 "global_batch": int(row["global_batch"]), "published_tflops": published}
        if best is None:
            entry.update(predicted_tflops=None, error=None, note="no layout fits in memory")
        else:
            entry.update(predicted_tflops=best.tflops_per_gpu, error=best.tflops_per_gpu / published - 1,
                         micro_batch=best.layout.micro_batch,
                         virtual_stages=best.layout.virtual_stages if best.layout.pp > 1 else None, ddp=ddp,
                         step_time_s=best.step_time_s, memory_gb=best.memory.total / 1e9,
                         breakdown={k: v / best.step_time_s for k, v in best.breakdown_s.items()})
        l, h = model.layers, model.hidden
        B = int(row["global_batch"])
        entry["params_exact"] = parameter_count(model) == paper_parameter_count(l, h, VOCAB, SEQ)
        entry["flops_exact"] = iteration_flops(model, B, "full") == paper_iteration_flops(B, SEQ, l, h, VOCAB)
        entry["params_model_billion"] = parameter_count(model) / 1e9
        out.append(entry)

    errors = [abs(e["error"]) for e in out if e["error"] is not None]
    mape = sum(errors) / len(errors) if errors else float("nan")
    worst = max(out, key=lambda e: abs(e["error"]) if e["error"] is not None else -1)
    summary = {"mape": mape, "worst_params_billion": worst["params_billion"], "worst_error": worst["error"],
               "layouts": "planner search" if args.search else "published (examples/sc21/run_table_1.sh)",
               "rows_predicted": len(errors), "params_exact_all": all(e["params_exact"] for e in out),
               "flops_exact_all": all(e["flops_exact"] for e in out), "gpu_type": acc.name}
    if args.json:
        print(json.dumps({"rows": out, "summary": summary}, indent=2))
        return 0

    print("Megatron-LM Table 1 (Narayanan et al. 2021): TFLOP/s per GPU, predicted from each row's layout "
          f"and the {acc.name} alone")
    if args.search:
        print("micro-batch b and interleaving v chosen by the planner as the fastest that fits "
              "(b | B/d, b <= 32; v >= 2, v | l/p); local DDP (reduction after the backward pass)")
    else:
        print("micro-batch b, interleaving v and DDP implementation as in the authors' scripts "
              "(NVIDIA/Megatron-LM examples/sc21/run_table_1.sh)")
    print()
    print(f"{'params':>8} {'t':>2} {'p':>3} {'d':>3} {'B':>5} {'b':>3} {'v':>3} {'DDP':>5} {'published':>9} "
          f"{'predicted':>9} {'error':>7}  {'mem GB':>6}  "
          "time shares: compute / tp comm / bubble / p2p / dp comm / accum / optim")
    for e in out:
        if e["predicted_tflops"] is None:
            print(f"{e['params_billion']:>7.1f}B  {e['note']}")
            continue
        shares = " / ".join(f"{e['breakdown'][k]:.2f}" for k in ("compute", "tensor_parallel_comm", "pipeline_bubble",
                                                                   "pipeline_p2p", "data_parallel_comm",
                                                                   "grad_accumulation", "optimizer"))
        print(f"{e['params_billion']:>7.1f}B {e['tp']:>2} {e['pp']:>3} {e['dp']:>3} {e['global_batch']:>5} "
              f"{e['micro_batch']:>3} {e['virtual_stages'] or '-':>3} {e['ddp']:>5} {e['published_tflops']:>9.0f} "
              f"{e['predicted_tflops']:>9.1f} {e['error']:>+7.1%}  {e['memory_gb']:>6.1f}  {shares}")
    print()
    print(f"MAPE {mape:.1%} over {len(errors)} rows; worst row {worst['params_billion']}B at {worst['error']:+.1%} "
          f"(target: MAPE <= 10%, every row within 20%)")
    print()
    print("Formula checks (exact rational arithmetic):")
    for e in out:
        print(f"  {e['params_billion']:>7.1f}B: parameters {e['params_model_billion']:.2f}B "
              f"{'== Eq. 2' if e['params_exact'] else '!= Eq. 2'}; FLOPs per iteration "
              f"{'== Eq. 3' if e['flops_exact'] else '!= Eq. 3'}")
    print(f"  all parameter counts equal Eq. 2: {summary['params_exact_all']}; "
          f"all FLOP counts equal Eq. 3: {summary['flops_exact_all']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
