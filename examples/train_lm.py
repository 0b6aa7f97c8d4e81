"""A tiny transformer language model on seeded synthetic tokens, preemptible with apportion.

The "language" is a seeded Markov chain over a small vocabulary (each token has a few likely
successors), so the loss visibly falls within a few hundred steps. Dropout is on: its random
masks are part of the checkpointed state (``rng_state()``), so a resumed run draws the same
masks as one that never stopped. Runs on CPU in seconds and on a GPU unchanged:

    python examples/train_lm.py --steps 200 --checkpoint-dir /tmp/lm-ckpt

It prints `final_checksum=...` (SHA-256 of all parameters) at the end.
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch
import torch.nn.functional as F
from torch import nn

from apportion.runtime import Job, ResumableSampler, rng_state, set_rng_state, weights_checksum


def synthetic_tokens(sequences: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """``sequences`` rows of ``length`` tokens from a seeded sparse Markov chain."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.full((vocab, vocab), -4.0)
    successors = torch.randint(0, vocab, (vocab, 4), generator=g)
    logits.scatter_(1, successors, torch.rand(vocab, 4, generator=g) * 3 + 1)
    probs = logits.softmax(dim=1)
    tokens = torch.empty(sequences, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (sequences,), generator=g)
    for t in range(1, length):
        tokens[:, t] = torch.multinomial(probs[tokens[:, t - 1]], 1, generator=g).squeeze(1)
    return tokens


class TinyLM(nn.Module):
    def __init__(self, vocab: int, context: int, width: int = 64, heads: int = 4, layers: int = 2,
                 dropout: float = 0.1) -> None:  # fmt: skip
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(context, width) / math.sqrt(width))
        layer = nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=4 * width, dropout=dropout, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        x = self.blocks(x, mask=self.mask[:n, :n], is_causal=True)
        return self.head(self.norm(x))



def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="total steps (APPORTION_TOTAL_STEPS wins)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=32, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--sequences", type=int, default=1024, help="size of the synthetic corpus")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint-dir", help="standalone checkpoints (APPORTION_CHECKPOINT_DIR wins)")
    parser.add_argument("--out", help="save the final weights here")
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    corpus = synthetic_tokens(args.sequences, args.context + 1, args.vocab, args.seed).to(device)
    model = TinyLM(args.vocab, args.context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sampler = ResumableSampler(len(corpus), seed=args.seed)

    # --- the apportion lines -------------------------------------------------------------
    job = Job.from_env(total_steps=args.steps, checkpoint_dir=args.checkpoint_dir)

    def state() -> dict:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "sampler": sampler.state(),
            "rng": rng_state(),  # dropout masks continue where they left off
        }

    saved = job.restore()
    if job.resumed:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state(saved["sampler"])
        set_rng_state(saved["rng"])

    model.train()
    for step in job.steps(state):
        with job.waiting_for_data():  # the batch's wait is timed: the server's STALL column
            batch = corpus[torch.tensor(sampler.take(args.batch_size), device=device)]
        # --- one ordinary training step --------------------------------------------------
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % args.log_every == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)

    digest, total = weights_checksum(model)
    print(f"final_checksum={digest} param_sum={total:.12e} steps={job.step} device={device.type}", flush=True)
    if args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
