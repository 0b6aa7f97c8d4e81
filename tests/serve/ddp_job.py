"""A data-parallel training job for the Ray tests: one process a slot, DDP over gloo.

A small linear model; at each step every rank draws its own part of the step's batch from a
generator seeded by (step, rank), so the weights depend only on the steps and the number of
ranks, never on where the ranks run or when they were preempted. Rank 0 prints
``final_weights=...`` at the end. ``STEP_S`` (environment) adds a pause to each step. Run
alone (no ``WORLD_SIZE``) it trains as one process; argv[1] is the total steps.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from apportion.runtime import Job, weights_checksum

STEP_S = float(os.environ.get("STEP_S", "0"))


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the executor
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    trained = DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    job = Job.from_env(total_steps=total)
    state = job.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    for step in job.steps(lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict()}):
        data = torch.Generator().manual_seed(step * 1000 + rank)
        x, y = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
        loss = ((trained(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(STEP_S)
    if rank == 0:
        print(f"final_weights={weights_checksum(model)} steps={job.step} world={world}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
