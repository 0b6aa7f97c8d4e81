"""Run Helios's own simulator (S-Lab-System-Group/HeliosArtifact, ``framework/QSSF Service``) on
the shared Philly trace, one virtual cluster at a time, and print each policy's average JCT per
VC as JSON.

Run it with a Python that has pandas (Helios's simulator needs it; apportion does not), from
anywhere:

    /tmp/helios-venv/bin/python benchmarks/compare/helios_philly.py PATH/TO/HeliosArtifact \
        --trace ../shared/traces/philly_pollux_jobs.csv.gz --policies fifo,srtf,qssf [--vcs 11cb48] [--gpus 16]

It writes Helios's inputs into its checkout's ``framework/QSSF Service`` (``data/Philly/...``,
``estimators/Philly_lgb.csv``) and its logs under ``log/``, and imports its modules unchanged:
``utils.trace_philly_process`` picks Oct–Nov 2017 and the VCs of ``data/philly_vc.csv`` (nodes × 8
GPUs, or ``--gpus`` for every VC), ``utils.simulate_vc`` replays one VC under one policy.

The shared trace is Philly's job log as Pollux shipped it: submission time (seconds since
2017-09-04 10:30:41, its first job), duration, GPUs and the VC hash, no user, job name or state.
Each job gets its own job name (its id), user "-" and state "Pass". Helios's Philly QSSF ranks by
``estimators/Philly_lgb.csv``: each job's true duration with an error drawn as Helios's
``estimators/philly_estimate.py`` draws it (its own script, run here with ``random`` seeded 6 as
it meant to: it assigns ``random.seed = 6`` instead of calling it), times its GPUs.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import json
import os
import pickle
import runpy
import sys
import time
from pathlib import Path

TRACE_START = datetime.datetime(2017, 9, 4, 10, 30, 41)  # the trace's first submission (its README)
SERVICE = Path("framework") / "QSSF Service"


def write_inputs(service: Path, trace: Path, vcs: list[str] | None, gpus: int | None,
                 gpus_per_node: int = 8) -> dict[str, int]:
    """Helios's Philly inputs from the shared trace: its cluster log and VC sizes (nodes of 8 GPUs);
    the VCs kept. ``gpus_per_node`` below 8 squeezes each VC to its nodes × that many GPUs (as
    whole 8-GPU nodes: Helios's placer knows no other)."""
    sizes = {}
    with open(service / "data" / "philly_vc.csv") as f:
        for row in csv.DictReader(f):
            sizes[row["vc"]] = int(row["node num"])
    if vcs:
        unknown = sorted(set(vcs) - set(sizes))
        if unknown:
            sys.exit(f"--vcs: {unknown[0]} is not a VC of Helios's data/philly_vc.csv ({', '.join(sizes)})")
        sizes = {vc: sizes[vc] for vc in vcs}
    if gpus_per_node != 8:
        total = {vc: nodes * gpus_per_node for vc, nodes in sizes.items()}
        if any(t % 8 for t in total.values()):
            sys.exit("--gpus-per-node: a VC's squeezed GPUs must be whole 8-GPU nodes")
        sizes = {vc: t // 8 for vc, t in total.items()}
    if gpus:
        if gpus % 8:
            sys.exit("--gpus must be a multiple of 8 (Helios's nodes have 8 GPUs)")
        sizes = {vc: gpus // 8 for vc in sizes}
    out = service / "data" / "Philly"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "vc_dict_homo.pkl", "wb") as f:
        pickle.dump(sizes, f, pickle.HIGHEST_PROTOCOL)
    with gzip.open(trace, "rt") as src, open(out / "cluster_log.csv", "w", newline="") as dst:
        writer = csv.writer(dst)
        writer.writerow(["user", "vc", "jobname", "gpu_num", "state", "submit_time", "duration"])
        for row in csv.DictReader(src):
            submitted = TRACE_START + datetime.timedelta(seconds=int(row["submit_time_s"]))
            writer.writerow(["-", row["queue"], row["job_id"], row["num_gpus"], "Pass",
                             submitted.strftime("%Y-%m-%d %H:%M:%S"), row["duration_s"]])
    return sizes


def make_estimates(service: Path) -> None:
    """Helios's own Philly estimator script, seeded as it meant to be."""
    import random

    here = os.getcwd()
    seed = random.seed
    os.chdir(service / "estimators")
    try:
        random.seed(6)
        runpy.run_path("philly_estimate.py", run_name="__main__")
    finally:
        os.chdir(here)
        random.seed = seed  # the script sets it to 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("helios", help="a checkout of S-Lab-System-Group/HeliosArtifact")
    parser.add_argument("--trace", required=True, help="the shared Philly trace (philly_pollux_jobs.csv.gz)")
    parser.add_argument("--policies", default="fifo,srtf,qssf", help="Helios's policies to run (fifo, sjf, srtf, qssf)")
    parser.add_argument("--vcs", default=None, help="only these VCs (comma separated)")
    parser.add_argument("--gpus", type=int, default=None, help="every VC this many GPUs instead of Helios's sizes")
    parser.add_argument("--gpus-per-node", type=int, default=8,
                        help="each VC's GPUs are its nodes × this (Helios's nodes have 8; 1: squeezed)")
    args = parser.parse_args()
    service = Path(args.helios).resolve() / SERVICE
    sizes = write_inputs(service, Path(args.trace).resolve(), args.vcs.split(",") if args.vcs else None, args.gpus,
                         args.gpus_per_node)
    os.chdir(service)
    sys.path.insert(0, str(service))
    make_estimates(service)

    import logging

    import utils  # Helios's
    from cluster import Cluster
    from estimators import PhillyEstimator

    logging.disable(logging.INFO)  # its progress lines
    trace_dir = "./data/Philly"
    log_dir = "./log/Philly"
    os.makedirs(log_dir + "/logfile", exist_ok=True)
    df, start_ts = utils.trace_philly_process(trace_dir, ("2017-10-01 00:00:00", "2017-11-30 23:59:00"))
    trace = utils.trace_parser(df)
    logger = logging.getLogger("helios")
    estimator = PhillyEstimator(argparse.Namespace(experiment_name="Philly"))
    result = {}
    for vc in Cluster(sizes, 8, 96).vc_list:
        result[vc.vc_name] = {"gpus": vc.total_gpus, "jobs": trace.vc_trace(vc.vc_name).job_num(), "avg_jct_s": {},
                              "cpu_s": {}}
        for policy in args.policies.split(","):
            fresh = Cluster({vc.vc_name: sizes[vc.vc_name]}, 8, 96).vc_list[0]  # each run on empty nodes
            started = time.process_time()
            utils.simulate_vc(utils.trace_parser(df), fresh, "consolidate", log_dir, policy, logger, start_ts,
                              *((estimator,) if policy == "qssf" else ()))
            import pandas as pd

            log = pd.read_csv(f"{log_dir}/{vc.vc_name}/{policy}_consolidate_{vc.vc_name}_log.csv")
            result[vc.vc_name]["avg_jct_s"][policy] = round(float(log["jct"].mean()), 1)
            result[vc.vc_name]["cpu_s"][policy] = round(time.process_time() - started, 1)
            print(f"helios {vc.vc_name} {policy}: {result[vc.vc_name]['avg_jct_s'][policy]:,.0f} s",
                  file=sys.stderr, flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
