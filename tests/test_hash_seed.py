"""Every registered policy and variant gives the same replay whatever Python's string hash seed:
nothing a result depends on may follow the order of a set or dict of strings, or an object's id.

Two processes, PYTHONHASHSEED=1 and =2, each replay a fixed-size and an elastic workload under
every policy and print one fingerprint a replay; the two listings must be the same, line by line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from apportion.policies import policy_names

ROOT = Path(__file__).resolve().parents[1]

FINGERPRINTS = """
import hashlib
import numpy as np
from apportion.experiment import WorkloadSettings, load_inputs, run_policy
from apportion.policies import policy_info, policy_names
from apportion.sim import SimConfig

WORKLOADS = {
    "elastic": (load_inputs(WorkloadSettings(jobs=16, rate_per_hour=20.0, seed=2, shape="pollux",
                                             cluster="t4:8,v100:4,k80:4")),
                SimConfig(round_s=120.0, restart_cost_s=30.0)),  # 2-minute rounds: every policy still decides each
    "fixed": (load_inputs(WorkloadSettings(jobs=40, rate_per_hour=30.0, seed=3, cluster="v100:4,p100:4,k80:8")),
              SimConfig(round_s=360.0, restart_cost_s=30.0)),
}
SPECS = [spec for name in policy_names() for spec in [name] + [f"{name}:{v}" for v in policy_info(name).variants]]
for workload, (inputs, config) in WORKLOADS.items():
    for spec in SPECS:
        try:
            result = run_policy(inputs, spec, config, **policy_info(spec).example_options())
        except ValueError as exc:  # a policy that cannot run this workload says so, alike under any seed
            print(spec, workload, "refused:", exc)
            continue
        digest = hashlib.sha256()
        for column in (result.finish_s, result.first_start_s, result.steps_done, result.status):
            digest.update(np.ascontiguousarray(column).tobytes())
        summary = {k: v for k, v in result.summary.items() if k != "sim_wall_s"}
        digest.update(repr(sorted(summary.items())).encode())
        print(spec, workload, digest.hexdigest()[:16])
"""


def fingerprints(*hash_seeds: str) -> list[list[str]]:
    """Each seed's listing, the processes run side by side."""
    runs = [subprocess.Popen([sys.executable, "-c", FINGERPRINTS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)})
            for seed in hash_seeds]
    listings = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
        listings.append(out.splitlines())
    return listings


def test_every_policy_replays_alike_under_two_hash_seeds():
    first, second = fingerprints("1", "2")

    assert len(first) >= 2 * len(policy_names())
    assert [line for line in first if "refused" not in line]  # the policies did run
    assert first == second
