"""`apportion serve` over a stand-in server that keeps the options it was started with, for the
tests of what a flag or a config file's key reaches the server as."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import apportion.serve.app.server
from apportion.cli import app

runner = CliRunner()
AS_ROOT = ("--run-as", "server-user") if os.geteuid() == 0 else ()  # a root server refuses to run jobs as root


@pytest.fixture
def started(monkeypatch):
    """The options `apportion serve` started the server with, one a start."""
    calls = []

    def serve(options, slots, policy, log, ready=None, executor=None, sock=None):
        calls.append(options)
        if sock is not None:
            sock.close()

    monkeypatch.setattr(apportion.serve.app.server, "serve", serve)
    return calls


def serve(tmp_path: Path, *args: str):
    """`apportion serve` on one CPU slot with its state under ``tmp_path`` and ``args``."""
    return runner.invoke(app, ["serve", "--port", "0", "--slots", "cpu:1", "--state-dir", str(tmp_path / "state"),
                               *AS_ROOT, *args])


def config_file(tmp_path: Path, text: str) -> Path:
    """``tmp_path``/server.yaml holding ``text``."""
    path = tmp_path / "server.yaml"
    path.write_text(text)
    return path
