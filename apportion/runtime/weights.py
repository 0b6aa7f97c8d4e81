"""A fingerprint of a model's weights, to show that a resumed run ended where an uninterrupted one did."""

from __future__ import annotations

import hashlib


def weights_checksum(model) -> tuple[str, float]:
    """(first 16 hex digits of SHA-256 over every state-dict tensor, sum of all entries as float64).

    Works on any torch ``nn.Module`` without importing torch here.
    """
    digest = hashlib.sha256()
    total = 0.0
    for name, tensor in model.state_dict().items():
        host = tensor.detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(host.numpy().tobytes())
        total += host.double().sum().item()
    return digest.hexdigest()[:16], total
