"""How well one measured step calibrates the model for other layouts, GPU counts and batch sizes.

Run from the repository root: ``python benchmarks/accuracy/perf_calibration.py [--json]``. Three published
tables, each used the same way: fit the software terms (``apportion.perf.calibrate.fit_step_time``:
one factor on the GEMM and kernel rates) to one row's measured iteration time, predict the other
rows from their own layouts, and compare.

1. Megatron-LM, Narayanan et al. 2021 (SC'21), Table 1 (``../shared/validation/
   megatron_ptdp_table1.csv``), with each row's published run settings (micro-batch,
   interleaving, DDP implementation: ``benchmarks/accuracy/perf_validation.py``). Every row takes its turn
   as the one measured; the error is over the nine others. 1.7B to 1T parameters, 32 to 3,072
   GPUs, tensor, pipeline and data parallelism all changing.
2. Megatron-Turing NLG 530B with Megatron-DeepSpeed (Smith et al. 2022, arXiv 2201.11990, §2.4):
   60.1, 50.2 and 44.4 s per iteration on 280, 350 and 420 DGX A100 nodes (t = 8, p = 35,
   d = 8/10/12, global batch 1,920, sequence 2,048, full recomputation). Fitted on 280 nodes,
   which is where the ``deepspeed-pipeline`` preset comes from; the 350- and 420-node rows are
   predicted. The ZeRO stage is not stated: 1 is assumed (DeepSpeed's pipeline engine allows 0
   or 1; the two differ by 0.2% in time here).
3. Llama 3 with PyTorch FSDP2 as torchtitan runs it (pytorch/torchtitan docs/performance.md, 64
   A100 80 GB, local batch 1, sequence 8,192, flash attention): 70B with full activation
   checkpointing at 331 tokens/s per GPU, which the ``fsdp`` preset is fitted to, and 8B with
   "selective op" checkpointing at 2,973, predicted (modelled as selective recomputation, which
   with flash attention recomputes nothing: torchtitan's op-level policy recomputes a few
   element-wise operations).

The uncalibrated hardware model (``megatron-lm``) is printed alongside.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from apportion.perf import Layout, TransformerModel, iteration_flops, predict  # noqa: E402
from apportion.perf.calibrate import fit_step_time  # noqa: E402
from apportion.perf.software import DEEPSPEED_PIPELINE, FSDP, SoftwareProfile  # noqa: E402
from apportion.perf.transformer import get_preset  # noqa: E402
from perf_validation import PUBLISHED_RUNS, SEQ, TABLE, VOCAB, rows  # noqa: E402

GPU = "a100-80gb"

MT_NLG = TransformerModel("mt-nlg-530b", layers=105, hidden=20480, heads=128, seq=2048, vocab=51200)
MT_NLG_ROWS = ((280, 8, 60.1), (350, 10, 50.2), (420, 12, 44.4))  # nodes, data-parallel size, s per iteration
TORCHTITAN_ROWS = (("llama3-70b-like", "full", 331.0), ("llama3-8b-like", "selective", 2973.0))


def megatron_case(row: dict) -> tuple[TransformerModel, Layout, float]:
    """Model, layout (published run settings) and measured seconds per iteration of one Table 1 row."""
    l, h, a = int(row["layers"]), int(row["hidden_size"]), int(row["attention_heads"])
    t, p, d, B = (int(row[k]) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "global_batch"))
    model = TransformerModel(f"gpt-{row['params_billion']}b", layers=l, hidden=h, heads=a, seq=SEQ, vocab=VOCAB)
    b, ddp, per_chunk = PUBLISHED_RUNS[row["params_billion"]]
    v = (l // p) // per_chunk if per_chunk else 1
    layout = Layout(tp=t, pp=p, dp=d, micro_batch=b, global_batch=B, recompute="full", schedule=(
        "none" if p == 1 else ("interleaved" if v > 1 else "1f1b")), virtual_stages=v,
        overlap_grad_reduce=(ddp == "torch"), precision="fp16")
    flops = iteration_flops(model, B, "full") / layout.gpus  # the paper's Eq. 3, per GPU
    return model, layout, flops / (float(row["tflops_per_gpu"]) * 1e12)


def mt_nlg_case(dp: int) -> Layout:
    return Layout(tp=8, pp=35, dp=dp, micro_batch=1, global_batch=1920, recompute="full", zero=1,
                  overlap_grad_reduce=False, precision="bf16")


def torchtitan_case(recompute: str) -> Layout:
    return Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=64, recompute=recompute, zero=3, schedule="none",
                  precision="bf16")


def error(predicted_s: float, measured_s: float) -> float:
    """Relative error of the predicted throughput (= measured time / predicted time − 1)."""
    return measured_s / predicted_s - 1


def megatron_table() -> dict:
    cases = [megatron_case(r) for r in rows()]
    names = [m.name for m, _, _ in cases]
    uncalibrated = [error(predict(m, lay, GPU).step_time_s, t) for m, lay, t in cases]
    by_row = []
    for i, (model, layout, measured) in enumerate(cases):
        fitted = fit_step_time(model, layout, GPU, measured)
        errs = [error(predict(m, lay, GPU, fitted.profile).step_time_s, t)
                for j, (m, lay, t) in enumerate(cases) if j != i]
        by_row.append({"calibrated_on": names[i], "factor": fitted.factor,
                       "mape_others": statistics.fmean(abs(e) for e in errs),
                       "worst_other": max(errs, key=abs)})
    mapes = [r["mape_others"] for r in by_row]
    return {"rows": len(cases), "uncalibrated_mape": statistics.fmean(abs(e) for e in uncalibrated),
            "uncalibrated_errors": dict(zip(names, uncalibrated)), "by_calibration_row": by_row,
            "mean_mape": statistics.fmean(mapes), "median_mape": statistics.median(mapes),
            "worst_mape": max(mapes)}


def mt_nlg() -> dict:
    fitted = fit_step_time(MT_NLG, mt_nlg_case(8), GPU, 60.1)
    out = {"factor": fitted.factor, "preset_factor": DEEPSPEED_PIPELINE.gemm_efficiency, "rows": []}
    for nodes, dp, measured in MT_NLG_ROWS:
        layout = mt_nlg_case(dp)
        out["rows"].append({"nodes": nodes, "measured_s": measured,
                            "uncalibrated_s": predict(MT_NLG, layout, GPU).step_time_s,
                            "calibrated_s": predict(MT_NLG, layout, GPU, fitted.profile).step_time_s,
                            "calibrated_error": error(predict(MT_NLG, layout, GPU, fitted.profile).step_time_s,
                                                      measured),
                            "fitted_on": nodes == 280})
    return out


def torchtitan() -> dict:
    flash = SoftwareProfile("flash-attention", flash_attention=True)
    (fit_name, fit_rc, fit_tps), (check_name, check_rc, check_tps) = TORCHTITAN_ROWS
    fit_model = get_preset(fit_name)
    fitted = fit_step_time(fit_model, torchtitan_case(fit_rc), GPU, fit_model.seq / fit_tps, flash)
    out = {"factor": fitted.factor, "preset_factor": FSDP.gemm_efficiency, "rows": []}
    for name, rc, tps in TORCHTITAN_ROWS:
        model = get_preset(name)
        measured = model.seq / tps
        layout = torchtitan_case(rc)
        calibrated = predict(model, layout, GPU, fitted.profile).step_time_s
        out["rows"].append({"model": name, "recompute": rc, "measured_tokens_per_s_per_gpu": tps,
                            "uncalibrated_tokens_per_s_per_gpu": model.seq / predict(model, layout, GPU).step_time_s,
                            "flash_uncalibrated_tokens_per_s_per_gpu":
                                model.seq / predict(model, layout, GPU, flash).step_time_s,
                            "calibrated_tokens_per_s_per_gpu": model.seq / calibrated,
                            "calibrated_error": error(calibrated, measured), "fitted_on": name == fit_name})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="the same figures (they take seconds): the test suite runs it")
    args = parser.parse_args()
    if not TABLE.exists():
        print(f"validation table not found at {TABLE}", file=sys.stderr)
        return 1
    result = {"megatron_table1": megatron_table(), "mt_nlg_deepspeed": mt_nlg(), "torchtitan_fsdp": torchtitan(),
              "gpu_type": GPU}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = result["megatron_table1"]
    print("Megatron-LM Table 1: calibrated on one row, throughput error on the other nine")
    print(f"{'calibrated on':>16} {'factor':>7} {'MAPE others':>12} {'worst other':>12}")
    for r in table["by_calibration_row"]:
        print(f"{r['calibrated_on']:>16} {r['factor']:7.3f} {r['mape_others']:12.1%} {r['worst_other']:+12.1%}")
    print(f"uncalibrated MAPE {table['uncalibrated_mape']:.1%} over {table['rows']} rows; calibrated on one row: "
          f"MAPE over the others {table['mean_mape']:.1%} mean, {table['median_mape']:.1%} median, "
          f"{table['worst_mape']:.1%} worst choice of row")
    print()
    mt = result["mt_nlg_deepspeed"]
    print(f"Megatron-Turing NLG 530B (Megatron-DeepSpeed), fitted on 280 nodes: factor {mt['factor']:.4f}")
    for r in mt["rows"]:
        print(f"  {r['nodes']} nodes: measured {r['measured_s']:.1f} s, uncalibrated {r['uncalibrated_s']:.1f} s, "
              f"calibrated {r['calibrated_s']:.1f} s ({r['calibrated_error']:+.1%})"
              + (" (fitted)" if r["fitted_on"] else ""))
    print()
    tt = result["torchtitan_fsdp"]
    print(f"Llama 3 with FSDP2 (torchtitan) on 64 A100s, fitted on {TORCHTITAN_ROWS[0][0]}: factor {tt['factor']:.4f}")
    for r in tt["rows"]:
        print(f"  {r['model']} ({r['recompute']}): measured {r['measured_tokens_per_s_per_gpu']:.0f} tokens/s/GPU, "
              f"uncalibrated {r['uncalibrated_tokens_per_s_per_gpu']:.0f} (flash {r['flash_uncalibrated_tokens_per_s_per_gpu']:.0f}), "
              f"calibrated {r['calibrated_tokens_per_s_per_gpu']:.0f} ({r['calibrated_error']:+.1%})"
              + (" (fitted)" if r["fitted_on"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
