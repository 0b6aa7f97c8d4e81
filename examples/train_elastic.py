"""An elastic data-parallel job: any number of replicas, resumed by any other number.

A small MLP regresses a seeded synthetic target. Run it alone, or as N replicas with
torch.distributed (gloo on CPU, NCCL on GPUs), e.g. two on this machine:

    WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python examples/train_elastic.py ... &
    WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python examples/train_elastic.py ...

The total batch (``--batch-size``, or ``APPORTION_BATCH_SIZE``) is split over the replicas;
the learning rate follows it by ``--lr-rule`` (``APPORTION_LR_RULE``: sqrt, adascale, none;
apportion.runtime.elastic). Rank 0 writes the checkpoints (model, optimizer, data position in
examples, noise estimate); every replica of a later attempt, however many, restores the
newest. Under `apportion serve` (examples/elastic.yaml) the server starts one replica a slot
and rank 0 reports the noise scale and the time its all-reduce takes with its progress. ``--stop-at STEP`` checkpoints at that step and exits 75, as a preemption does, so
that a rescale can be tried by hand. Every replica measures the gradient noise scale (across
replicas, or across two micro-batches alone) and rank 0 prints it.

With ``--target-examples`` (``APPORTION_TARGET_EXAMPLES``) it stops at the first step that
reaches that many examples, however the batch changed between attempts.

It prints ``final steps=... examples=... param_sum=...`` and, with ``--loss-log FILE``,
appends ``step loss`` lines to FILE (rank 0).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from apportion.runtime import Job, ResumableSampler, rng_state, set_rng_state, weights_checksum
from apportion.runtime.elastic import ElasticSetting, GradientNoise, replica_indices
from apportion.runtime.job import PREEMPTED_EXIT_CODE


def synthetic_data(n: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and a noisy target from a fixed random teacher: the same everywhere."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    teacher = torch.randn(features, 1, generator=g)
    y = torch.tanh(x @ teacher) + 0.3 * torch.randn(n, 1, generator=g)
    return x, y


def gradient_vector(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="total steps (APPORTION_TOTAL_STEPS wins)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32, help="total batch (APPORTION_BATCH_SIZE wins)")
    parser.add_argument("--init-batch-size", type=int, default=32, help="M0 (APPORTION_INIT_BATCH_SIZE wins)")
    parser.add_argument("--lr", type=float, default=0.05, help="the learning rate tuned at M0")
    parser.add_argument("--lr-rule", default="sqrt", help="sqrt, adascale or none (APPORTION_LR_RULE wins)")
    parser.add_argument("--examples", type=int, default=4096, help="size of the synthetic data set")
    parser.add_argument("--target-examples", type=int,
                        help="stop at this many examples instead of --steps (APPORTION_TARGET_EXAMPLES wins)")
    parser.add_argument("--checkpoint-dir", help="standalone checkpoints (APPORTION_CHECKPOINT_DIR wins)")
    parser.add_argument("--stop-at", type=int, help="checkpoint at this step and exit 75, as if preempted")
    parser.add_argument("--loss-log", help="append 'step loss' lines here (rank 0)")
    parser.add_argument("--step-s", type=float, default=0.0, help="pause after each step (to watch a rescale)")
    args = parser.parse_args(argv)

    setting = ElasticSetting.from_environ(batch_size=args.batch_size, init_batch_size=args.init_batch_size,
                                          lr_rule=args.lr_rule, target_examples=args.target_examples)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    distributed = setting.world_size > 1
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                rank=setting.rank, world_size=setting.world_size)
    device = torch.device(f"cuda:{setting.rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu")

    x, y = synthetic_data(args.examples, 16, args.seed)
    x, y = x.to(device), y.to(device)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    sampler = ResumableSampler(len(x), seed=args.seed)
    noise = GradientNoise()
    seen = {"examples": 0}

    # --- the apportion lines: every rank makes its Job; rank 0 owns the lease and writes checkpoints,
    # every rank restores, and all stop at the same step (a lease not renewed, or SIGTERM to any)
    job = Job.from_env(total_steps=args.steps, checkpoint_dir=args.checkpoint_dir)

    def state() -> dict:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "sampler": sampler.state(),
                "examples_seen": seen["examples"], "noise": noise.state(), "rng": rng_state()}

    saved = job.restore()
    if job.resumed:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state(saved["sampler"])
        noise.load_state(saved["noise"])
        seen["examples"] = saved["examples_seen"]
        set_rng_state(saved["rng"])
    if setting.target_examples is not None:  # a target in examples: as many steps as reach it at this batch
        job.total_steps = job.step + setting.steps_left(seen["examples"])
    if setting.rank == 0:
        print(f"attempt: {setting.world_size} replica(s), batch {setting.batch_size}, from step {job.step}, "
              f"{seen['examples']} examples seen", flush=True)

    log = open(args.loss_log, "a") if args.loss_log and setting.rank == 0 else None
    sync_s = 0.0
    for step in job.steps(state):
        if args.stop_at is not None and step == args.stop_at:
            if setting.rank == 0:
                job.checkpoint(state())
                print(f"stopped at step {step} with {seen['examples']} examples seen", flush=True)
            if distributed:
                dist.barrier()
                dist.destroy_process_group()
            sys.exit(PREEMPTED_EXIT_CODE)
        index = torch.tensor(replica_indices(sampler, setting), device=device)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * setting.lr_scale(noise)
        optimizer.zero_grad(set_to_none=True)
        # this replica's share of the mean loss over the global batch; alone, as two micro-batches
        halves = [index] if distributed else [index[: len(index) // 2], index[len(index) // 2:]]
        small = []
        for part in halves:
            loss = F.mse_loss(model(x[part]), y[part], reduction="sum") / setting.batch_size
            before = None if not small else gradient_vector(model).clone()
            loss.backward()
            grad = gradient_vector(model) - (0 if before is None else before)
            small.append(float((grad * setting.batch_size / len(part)).square().sum()))  # |mean gradient of part|²
        if distributed:  # the all-reduce follows the backward pass: its length is the step's wait for it (sync_s)
            started = time.perf_counter()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            sync_s = 0.9 * sync_s + 0.1 * (time.perf_counter() - started) if sync_s else time.perf_counter() - started
            mine = torch.tensor([small[0] * len(index)], device=device)
            dist.all_reduce(mine)
            small_sqr, small_batch = float(mine) / setting.batch_size, setting.batch_size / setting.world_size
        else:
            small_sqr, small_batch = sum(small) / 2, len(index) / 2
        big_sqr = float(gradient_vector(model).square().sum())
        noise.update(small_sqr, small_batch, big_sqr, setting.batch_size)
        optimizer.step()
        seen["examples"] += setting.batch_size
        # what the scheduler fits this job's speed and statistical efficiency to (sent with rank 0's reports)
        job.measured(noise_scale=noise.noise_scale, sync_s=sync_s, micro_batch=len(halves[-1]),
                     micro_batches=len(halves), examples_done=seen["examples"])
        if args.step_s:
            time.sleep(args.step_s)
        if log is not None:
            with torch.no_grad():
                full = float(F.mse_loss(model(x), y))
            log.write(f"{step + 1} {full:.8f}\n")
            log.flush()

    _, total = weights_checksum(model)
    if setting.rank == 0:
        print(f"final steps={job.step} examples={seen['examples']} param_sum={total:.12e} "
              f"noise_scale={noise.noise_scale:.4g}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
