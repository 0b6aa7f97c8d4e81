"""A server's waiting spares (warm starts) across its restarts: a killed server's spares, and the
factory that forks them, are adopted by the next one, whose clean stop leaves none behind."""

from __future__ import annotations

import time

import pytest

from apportion.executors.local.spare_pool import live_spares
from serve_helpers import Server

pytest.importorskip("torch", reason="a spare imports torch")


def ready_spares(state_dir, count: int, timeout: float = 120.0) -> list[int]:
    """The pids of ``count`` spares (the factory one of them) that have done their imports."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        spares = live_spares(state_dir)
        if len(spares) == count and all((state_dir / "spares" / f"{o['--spare']}.ready").exists() for _, _, o in spares):
            return sorted(pid for pid, _, _ in spares)
        time.sleep(0.1)
    raise AssertionError(f"{count} spares were not ready in time")


def test_a_restarted_server_adopts_the_waiting_spares_and_a_clean_stop_kills_them(tmp_path):
    state_dir = tmp_path / "state"
    server = Server(state_dir, "--slots", "cpu:2").start()
    try:
        spares = ready_spares(state_dir, 3)  # one a slot, and the factory
        server.kill()
        server.start()
        deadline = time.time() + 30
        while len(list((state_dir / "spares").glob("*.owner"))) < 3 and time.time() < deadline:
            time.sleep(0.1)

        assert ready_spares(state_dir, 3) == spares  # the same processes, not new ones importing again
        assert len(list((state_dir / "spares").glob("*.owner"))) == 3
    finally:
        server.stop()

    assert server.process.returncode == 143  # SIGTERM, after the clean-up
    deadline = time.time() + 10
    while live_spares(state_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert live_spares(state_dir) == []
    assert list((state_dir / "spares").iterdir()) == []
