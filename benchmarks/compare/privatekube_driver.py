"""Run PrivateKube's simulator (columbia/PrivateKube, ``simulator/dpsched``) on a task list, for
``benchmarks/compare/privacy.py``'s side-by-side comparison. Runs under PrivateKube's own Python (its
forks of simpy and desmod on the path), never imported by apportion.

    python privatekube_driver.py SPEC.json   # prints one JSON line: granted, wall_s

SPEC: ``tasks`` (a YAML file in PrivateKube's workload-trace format), ``policy`` (FCFS, DPF_N,
DPF_T, RR_N, RR_T), ``n``, ``t_s``, ``timeout_s`` (null: none), ``duration_s``, ``blocks_at_start``,
``static`` (no more blocks after those), ``block_every_s``, ``arrival_every_s`` (their clock's tick
is half of it), ``workspace``.
"""

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="the run's JSON spec (written by benchmarks/compare/privacy.py)")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    from desmod.simulation import simulate
    from dpsched import Top
    from dpsched.utils.configs import DpPolicyType

    static = spec["static"]
    config = {
        "sim.numerical_delta": 1e-8, "sim.instant_timeout": 0.01,
        "workload_test.enabled": True, "workload_test.workload_trace_file": spec["tasks"],
        "task.demand.num_blocks.mice": 1, "task.demand.num_blocks.elephant": 10,
        "task.demand.num_blocks.mu": 20, "task.demand.num_blocks.sigma": 10,
        "task.demand.epsilon.mean_tasks_per_block": 15,
        "task.demand.epsilon.mice": 1e-2, "task.demand.epsilon.elephant": 1e-1,
        "task.completion_time.constant": 0, "task.demand.num_cpu.constant": 1,
        "resource_master.block.init_epsilon": 1.0, "resource_master.block.init_delta": 1.0e-6,
        "resource_master.block.arrival_interval": spec["block_every_s"],
        "resource_master.dp_policy.dpf_family.grant_top_small": False,
        "sim.duration": "%d s" % spec["duration_s"],
        "task.timeout.interval": spec["timeout_s"] or 0,
        "task.timeout.enabled": spec["timeout_s"] is not None,
        "task.arrival_interval": spec["arrival_every_s"],
        "resource_master.dp_policy.is_admission_control_enabled": False,
        "resource_master.dp_policy.is_rdp": False,
        "resource_master.dp_policy": DpPolicyType(spec["policy"]),
        "resource_master.dp_policy.denominator": spec["n"],
        "resource_master.block.lifetime": spec["t_s"],
        "resource_master.block.is_static": static,
        # their generator makes init_amount blocks, then one more unless static
        "resource_master.block.init_amount": spec["blocks_at_start"] - (0 if static else 1),
        "task.demand.num_blocks.mice_percentage": 75.0, "task.demand.epsilon.mice_percentage": 75.0,
        "resource_master.is_cpu_needed_only": True, "resource_master.cpu_capacity": sys.maxsize,
        "resource_master.memory_capacity": 624, "resource_master.gpu_capacity": 8,
        "resource_master.clock.tick_seconds": 25, "sim.clock.adaptive_tick": True,
        "sim.db.enable": True, "sim.db.persist": False,
        "sim.dot.colorscheme": "blues5", "sim.dot.enable": False,
        "sim.runtime.timeout": 60, "sim.gtkw.file": "sim.gtkw", "sim.gtkw.live": False,
        "sim.log.enable": False, "sim.log.level": "INFO", "sim.progress.enable": False,
        "sim.result.file": "result.json", "sim.seed": 3345, "sim.timescale": "s",
        "sim.vcd.dump_file": "sim_dp.vcd", "sim.vcd.enable": False, "sim.vcd.persist": False,
        "sim.workspace": spec["workspace"], "sim.workspace.overwrite": True,
    }
    started = time.perf_counter()
    result = simulate(config, Top)
    wall_s = time.perf_counter() - started
    print(json.dumps({"granted": result.get("succeed_tasks_total"), "wall_s": round(wall_s, 3)}))


if __name__ == "__main__":
    main()
