"""`apportion serve --executor ray` refuses what cannot work, in one line, before joining anything."""

from __future__ import annotations

import importlib.util
import socket

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from serve_helpers import AS_ROOT


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


NO_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


@pytest.mark.parametrize("args, message", [
    pytest.param(["--executor", "ray", "--ray-address", "127.0.0.1:{port}"],
                 "no Ray cluster at 127.0.0.1:{port}: Connection refused (is `ray start --head` running there?)",
                 marks=NO_RAY),
    (["--executor", "ray", "--slots", "cpu:2"], "--slots: on Ray the slots are the cluster's GPUs"),
    (["--executor", "ray", "--run-as", "mapped"], "--run-as mapped: on Ray, jobs run as the OS user of the Ray workers"),
    (["--ray-address", "10.0.0.1:6379"], "--ray-address needs --executor ray"),
    (["--executor", "kubernetes"], "--executor must be local, ray or slurm, got 'kubernetes'"),
])
def test_a_ray_server_that_cannot_work_says_why(tmp_path, args, message):
    port = unused_port()
    command = ["serve", "--port", "0", "--state-dir", str(tmp_path / "state"), *AS_ROOT,
               *(a.format(port=port) for a in args)]
    result = CliRunner().invoke(app, command)

    assert result.exit_code == 2, result.output
    assert message.format(port=port) in " ".join(result.output.split())


def test_a_cluster_file_without_a_ray_section_is_named(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("node_groups:\n  - gpu_type: v100\n    nodes: 1\n")
    result = CliRunner().invoke(app, ["serve", "--port", "0", "--state-dir", str(tmp_path / "state"), *AS_ROOT,
                                      "--executor", "ray",
                                      "--cluster", str(cluster)])

    assert result.exit_code == 2
    assert f"{cluster}: expected a 'ray:' section" in " ".join(result.output.split())
