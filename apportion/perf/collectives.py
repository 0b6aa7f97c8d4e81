"""Time collectives among several processes (``apportion profile --processes N``).

The step model prices an all-reduce and an all-to-all from link bandwidths and NCCL's measured
efficiencies (:mod:`apportion.perf.parallel`). Where a machine has more than one device, or
when asked to treat N local processes as N devices (gloo on the CPU), this module runs those
collectives for real and records what they took, as entries of a measurement file::

    {kind: allreduce, bytes: 4194304, ranks: 2, backend: gloo, seconds: 0.0031}

``bytes`` is what each rank contributes (the all-reduce's buffer; for an all-to-all, all that
a rank sends, 1/ranks of it to each rank). :func:`apportion.perf.calibrate.fit_kernels` turns
them into the profile's ``comm_efficiency``.

Each process joins a process group through a file rendezvous in a temporary folder (no port to
pick), runs every collective once to warm up, then ``repeats`` times after a barrier; a run's
time is the slowest rank's, and the median run is kept.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

COLLECTIVES = ("allreduce", "alltoall")


def time_collectives(ranks: int, sizes: list[tuple[str, int]], *, backend: str = "gloo", repeats: int = 5,
                     alltoall: bool = False) -> list[dict]:
    """Time an all-reduce of each of ``sizes`` (name, bytes per rank) among ``ranks`` processes
    (and an all-to-all of each when ``alltoall``); one process per CUDA device with ``nccl``."""
    import torch.multiprocessing as mp

    if ranks < 2:
        raise ValueError(f"collectives need at least 2 processes, got {ranks}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    with tempfile.TemporaryDirectory(prefix="apportion-collectives-") as folder:
        out = Path(folder) / "times.json"
        mp.spawn(_rank_main, args=(ranks, backend, f"file://{folder}/rendezvous", sizes, repeats, alltoall,
                                   str(out)), nprocs=ranks, join=True)
        return json.loads(out.read_text())


def _rank_main(rank: int, ranks: int, backend: str, init_method: str, sizes: list[tuple[str, int]], repeats: int,
               alltoall: bool, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=ranks)
    try:
        entries = []
        for name, nbytes in sizes:
            elements = max(ranks, nbytes // 4 // ranks * ranks)  # fp32, divisible among the ranks
            x = torch.ones(elements, dtype=torch.float32, device=device)
            y = torch.empty_like(x)
            kinds = [("allreduce", lambda: dist.all_reduce(x))]
            if alltoall:
                kinds.append(("alltoall", lambda: dist.all_to_all_single(y, x)))
            for kind, run in kinds:
                seconds = _median_slowest(run, repeats, device)
                entries.append({"kind": kind, "name": name, "bytes": 4 * elements, "ranks": ranks,
                                "backend": backend, "seconds": seconds})
        if rank == 0:
            Path(out).write_text(json.dumps(entries))
    finally:
        dist.destroy_process_group()


def _median_slowest(run, repeats: int, device) -> float:
    """The median over ``repeats`` runs of the slowest rank's time (after one warm-up run)."""
    import torch
    import torch.distributed as dist

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run()
    sync()
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        run()
        sync()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(float(elapsed.item()))
    return statistics.median(times)
