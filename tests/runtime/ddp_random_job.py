"""A data-parallel job (DDP over gloo, one process a rank) whose every step depends on each rank's
own random state: its batch is drawn from the global torch generator (seeded per rank), through
dropout, at positions of a data order of its own (a ``ResumableSampler`` seeded per rank). It saves
``rng_state()`` as docs/runtime.md shows (rank 0's, as rank 0 writes the checkpoint) and its data
order through ``rank_state``, so a resume is exact only if every rank gets its own back.
Rank 0 prints ``final_weights=...``; argv[1] is the total steps, ``STEP_S`` a pause a step."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from apportion.runtime import Job, ResumableSampler, rng_state, set_rng_state, weights_checksum

STEP_S = float(os.environ.get("STEP_S", "0"))


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.3), torch.nn.Linear(32, 4))
    trained = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(100 + rank)  # each rank's own stream from here on
    pool = torch.randn(64, 16)  # this rank's examples
    sampler = ResumableSampler(len(pool), seed=rank)
    job = Job.from_env(total_steps=total)
    state = job.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])  # rank 0's: the runtime gives each rank its own before the first step
        sampler.load_state(job.rank_state["sampler"])
    saved = lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state()}  # noqa: E731
    for _ in job.steps(saved, rank_state=lambda: {"sampler": sampler.state()}):
        x = pool[sampler.take(8)] + 0.1 * torch.randn(8, 16)
        y = torch.randn(8, 4)
        loss = ((trained(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(STEP_S)
    if rank == 0:
        print(f"final_weights={weights_checksum(model)} steps={job.step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
