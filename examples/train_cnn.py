"""A small CNN on seeded synthetic 16x16 images, preemptible and resumable with apportion.

Runs on CPU in seconds and on a GPU unchanged. Standalone:

    python examples/train_cnn.py --steps 200 --checkpoint-dir /tmp/cnn-ckpt

Under `apportion serve` (see examples/cnn.yaml) the environment sets the lease, the total
steps and the checkpoint directory. Preempted five times or never, it ends with the same
weights: it prints `final_checksum=...` (SHA-256 of all parameters) to show it. In a job array
(`apportion submit --array 0-3 ... -- python examples/train_cnn.py`) each task's seed is its index.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch
import torch.nn.functional as F
from torch import nn

from apportion.runtime import Job, ResumableSampler, rng_state, set_rng_state, weights_checksum


def synthetic_images(n: int, classes: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of ``classes`` random templates plus noise: learnable, and the same everywhere."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, 3, size, size, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    images = templates[labels] + 2.0 * torch.randn(n, 3, size, size, generator=g)
    return images, labels


def make_model(classes: int, size: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (size // 4) ** 2, classes),
    )  # fmt: skip



def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="total steps (APPORTION_TOTAL_STEPS wins)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("APPORTION_ARRAY_INDEX", "0")),
                        help="the data's and the weights' seed (default: a job array's index, else 0)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--images", type=int, default=2048, help="size of the synthetic data set")
    parser.add_argument("--size", type=int, default=16, help="image side in pixels (a multiple of 4)")
    parser.add_argument("--checkpoint-dir", help="standalone checkpoints (APPORTION_CHECKPOINT_DIR wins)")
    parser.add_argument("--out", help="save the final weights here")
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    images, labels = synthetic_images(args.images, 10, args.size, args.seed)
    images, labels = images.to(device), labels.to(device)
    model = make_model(10, args.size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = ResumableSampler(len(images), seed=args.seed)

    # --- the apportion lines -------------------------------------------------------------
    job = Job.from_env(total_steps=args.steps, checkpoint_dir=args.checkpoint_dir)

    def state() -> dict:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "sampler": sampler.state(),
            "rng": rng_state(),
        }

    saved = job.restore()
    if job.resumed:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state(saved["sampler"])
        set_rng_state(saved["rng"])

    for step in job.steps(state):
        with job.waiting_for_data():  # the batch's wait is timed: the server's STALL column
            index = torch.tensor(sampler.take(args.batch_size), device=device)
            inputs, targets = images[index], labels[index]
        # --- one ordinary training step --------------------------------------------------
        loss = F.cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % args.log_every == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)

    digest, total = weights_checksum(model)
    print(f"final_checksum={digest} param_sum={total:.12e} steps={job.step} device={device.type}", flush=True)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
