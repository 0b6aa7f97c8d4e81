"""Check apportion.perf against Table 1 of Narayanan et al. 2021 (Megatron-LM, SC'21).

For each of the ten rows the model gets only what the row states and what the hardware is:
layers, hidden size, heads, tensor/pipeline/data-parallel sizes, global batch, sequence 2,048,
vocabulary 51,200, full activation recomputation, interleaved 1F1B where p > 1, on the
catalog's a100-80gb (Selene: DGX A100 80 GB, 8 GPUs and 8 HDR adapters per node). The paper does
not publish each row's micro-batch size or interleaving degree; as its authors did, the planner
picks them: the fastest micro-batch b dividing B/d (up to 32) and number of chunks v ≥ 2 dividing
l/p whose memory fits. Gradients are reduced after the backward pass, as Megatron-LM's 2021
"local" DDP did (megatron/training.py, ``backward-params-all-reduce``), in fp16.

Then it checks the model's parameter count and FLOPs per iteration against the paper's Eq. 2
and Eq. 3 exactly (rational arithmetic), for every row.

    python benchmarks/perf_validation.py            # table, MAPE, worst row, formula checks
    python benchmarks/perf_validation.py --json     # the same figures as JSON
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from apportion.perf import TransformerModel, get_accelerator, iteration_flops, parameter_count, plan
from apportion.perf.transformer import paper_iteration_flops, paper_parameter_count

TABLE = Path(__file__).resolve().parents[1].parent / "shared" / "validation" / "megatron_ptdp_table1.csv"
SEQ, VOCAB = 2048, 51200


def rows(path: Path = TABLE) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def predict_row(row: dict, accelerator: str = "a100-80gb"):
    l, h, a = int(row["layers"]), int(row["hidden_size"]), int(row["attention_heads"])
    t, p, d, B = (int(row[k]) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "global_batch"))
    model = TransformerModel(f"gpt-{row['params_billion']}b", layers=l, hidden=h, heads=a, seq=SEQ, vocab=VOCAB)
    result = plan(model, t * p * d, accelerator, B, top=1, tp=t, pp=p, recompute="full", sequence_parallel=False,
                  zero=0, schedule="interleaved" if p > 1 else "none", precision="fp16",
                  overlap_grad_reduce=False, keep_rejected=False)
    return model, (result.best[0] if result.best else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--gpu-type", default="a100-80gb")
    args = parser.parse_args()
    if not TABLE.exists():
        print(f"validation table not found at {TABLE}", file=sys.stderr)
        return 1
    acc = get_accelerator(args.gpu_type)

    out = []
    for row in rows():
        model, best = predict_row(row, acc.name)
        published = float(row["tflops_per_gpu"])
        entry = {"params_billion": float(row["params_billion"]), "tp": int(row["tensor_parallel"]),
                 "pp": int(row["pipeline_parallel"]), "dp": int(row["data_parallel"]), "gpus": int(row["gpus"]),
                 "global_batch": int(row["global_batch"]), "published_tflops": published}
        if best is None:
            entry.update(predicted_tflops=None, error=None, note="no micro-batch fits")
        else:
            entry.update(predicted_tflops=best.tflops_per_gpu, error=best.tflops_per_gpu / published - 1,
                         micro_batch=best.layout.micro_batch,
                         virtual_stages=best.layout.virtual_stages if best.layout.pp > 1 else None,
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
               "rows_predicted": len(errors), "params_exact_all": all(e["params_exact"] for e in out),
               "flops_exact_all": all(e["flops_exact"] for e in out), "gpu_type": acc.name}
    if args.json:
        print(json.dumps({"rows": out, "summary": summary}, indent=2))
        return 0

    print("Megatron-LM Table 1 (Narayanan et al. 2021): TFLOP/s per GPU, predicted from each row's layout "
          f"and the {acc.name} alone")
    print("micro-batch b and interleaving v are not published: the planner chose the fastest that fits "
          "(b | B/d, b <= 32; v >= 2, v | l/p)")
    print()
    print(f"{'params':>8} {'t':>2} {'p':>3} {'d':>3} {'B':>5} {'b':>3} {'v':>3} {'published':>9} {'predicted':>9} "
          f"{'error':>7}  {'mem GB':>6}  time shares: compute / tp comm / bubble / p2p / dp comm / accum / optim")
    for e in out:
        if e["predicted_tflops"] is None:
            print(f"{e['params_billion']:>7.1f}B  {e['note']}")
            continue
        shares = " / ".join(f"{e['breakdown'][k]:.2f}" for k in ("compute", "tensor_parallel_comm", "pipeline_bubble",
                                                                   "pipeline_p2p", "data_parallel_comm",
                                                                   "grad_accumulation", "optimizer"))
        print(f"{e['params_billion']:>7.1f}B {e['tp']:>2} {e['pp']:>3} {e['dp']:>3} {e['global_batch']:>5} "
              f"{e['micro_batch']:>3} {e['virtual_stages'] or '-':>3} {e['published_tflops']:>9.0f} "
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
