"""One Slurm task of an attempt: ``srun ... python -m apportion.executors.slurm.task --job-dir D --attempt N -- WRAPPER-ARGS``.

Slurm starts this once per rank (``SLURM_PROCID``) on the nodes the attempt was pinned to. It gives
its rank torch.distributed's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``: the node ``srun`` runs on, ``MASTER_PORT``: one per Slurm
job) and the GPUs Slurm bound to it (``CUDA_VISIBLE_DEVICES``), writes its node's name for
``nodes_of``, points its output at its own log, then runs the local executor's wrapper in this
process (``executors/local/wrapper.py``): the same checkpoint, exit-record and stop-signal contract as
on this machine. Rank R > 0 writes ``attempt-N.rank-R.{log,exit}``. It runs as the job's account
(sbatch ``--uid``): nothing here needs root.
"""

from __future__ import annotations

import json
import os
import sys

from apportion.executors.local.wrapper import write_env_file

PORT_BASE, PORT_SPAN = 29500, 20000  # MASTER_PORT: PORT_BASE + the Slurm job id modulo PORT_SPAN


def tasks_on_nodes(text: str) -> list[int]:
    """``2(x3),1`` (``SLURM_STEP_TASKS_PER_NODE``) -> ``[2, 2, 2, 1]``."""
    out = []
    for part in (p for p in text.split(",") if p):
        count, _, times = part.partition("(x")
        out += [int(count)] * int(times.rstrip(")") or 1)
    return out


def rank_env(base: dict[str, str], slurm: dict[str, str]) -> dict[str, str]:
    """The rank's environment: the job's ``base`` plus its rank, world and rendezvous, and Slurm's GPUs."""
    env = dict(base)
    world = int(slurm.get("SLURM_STEP_NUM_TASKS") or slurm.get("SLURM_NTASKS") or 1)
    if "CUDA_VISIBLE_DEVICES" in slurm:  # the node's GPUs Slurm gave the job: one a rank, by its local rank
        devices = [d for d in slurm["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        local = int(slurm.get("SLURM_LOCALID") or 0)
        env["CUDA_VISIBLE_DEVICES"] = devices[local % len(devices)] if world > 1 and devices else ",".join(devices)
    if world > 1:
        per_node = tasks_on_nodes(slurm.get("SLURM_STEP_TASKS_PER_NODE", ""))
        node = int(slurm.get("SLURM_NODEID") or 0)
        job = int(slurm.get("SLURM_JOB_ID") or 0)
        env.update({"RANK": slurm.get("SLURM_PROCID", "0"), "WORLD_SIZE": str(world),
                    "LOCAL_RANK": slurm.get("SLURM_LOCALID", "0"),
                    "LOCAL_WORLD_SIZE": str(per_node[node] if node < len(per_node) else 1),
                    "MASTER_ADDR": slurm.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1",
                    "MASTER_PORT": str(PORT_BASE + job % PORT_SPAN)})
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--")
    options = dict(zip(argv[:cut:2], argv[1:cut:2]))
    wrapper_args = argv[cut + 1:]
    job_dir, attempt = options["--job-dir"], options["--attempt"]
    rank = int(os.environ.get("SLURM_PROCID") or 0)
    stem = os.path.join(job_dir, f"attempt-{attempt}" + (f".rank-{rank}" if rank else ""))
    log = os.open(f"{stem}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        with open(os.path.join(job_dir, f"attempt-{attempt}.env"), encoding="utf-8") as handle:
            base = json.load(handle)
        with open(f"{stem}.node", "w", encoding="utf-8") as handle:
            handle.write(os.environ.get("SLURMD_NODENAME", ""))
        write_env_file(f"{stem}.rank-env", rank_env(base, dict(os.environ)))
    except (OSError, ValueError) as err:
        print(f"apportion: cannot prepare rank {rank}: {err}", file=sys.stderr, flush=True)
        return 127
    try:
        os.setpgid(0, 0)  # the wrapper leads its own group, as on this machine
    except OSError:  # already a session's leader
        pass
    from apportion.executors.local import wrapper  # in this process: no second interpreter to start

    return wrapper.main(["--exit-file", f"{stem}.exit", "--env-file", f"{stem}.rank-env", *wrapper_args])


if __name__ == "__main__":
    sys.exit(main())
