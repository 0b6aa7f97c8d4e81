"""Slots: this machine's GPUs through nvidia-smi (faked here), or CPU slots."""

from __future__ import annotations

import pytest

from apportion.core.errors import InputError
from apportion.serve.base.slots import describe, detect_gpus, gpu_type_of, parse_slots


@pytest.mark.parametrize("model, gpu_type", [
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
])
def test_model_names_map_to_catalog_types(model, gpu_type):
    assert gpu_type_of(model) == gpu_type


def fake_smi(tmp_path, output: str, code: int = 0):
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_detect_gpus_reads_nvidia_smi(tmp_path):
    smi = fake_smi(tmp_path, "0, NVIDIA H100 80GB HBM3\n1, NVIDIA H100 80GB HBM3\n2, Tesla V100-SXM2-16GB\n")
    slots = detect_gpus(smi)
    assert [(s.id, s.gpu_type, s.device) for s in slots] == [
        ("gpu:0", "h100", "0"), ("gpu:1", "h100", "1"), ("gpu:2", "v100", "2")]
    assert describe(slots) == "h100:2,v100:1"
    assert parse_slots("v100:1,h100:1", slots) == [slots[2], slots[0]]
    with pytest.raises(InputError, match="asks for 3 h100 GPUs; this machine has 2"):
        parse_slots("h100:3", slots)


def test_a_failing_nvidia_smi_means_no_gpus(tmp_path):
    assert detect_gpus(fake_smi(tmp_path, "NVIDIA-SMI has failed\n", code=9)) == []


def test_cpu_slots_and_declared_gpus():
    cpus = parse_slots("cpu:3")
    assert [(s.id, s.gpu_type, s.device) for s in cpus] == [("cpu:0", "cpu", ""), ("cpu:1", "cpu", ""), ("cpu:2", "cpu", "")]
    declared = parse_slots("a100:2,cpu:1", [])
    assert [(s.id, s.gpu_type, s.device) for s in declared] == [("gpu:0", "a100", "0"), ("gpu:1", "a100", "1"),
                                                                ("cpu:0", "cpu", "")]
    for bad in ("", "cpu", "cpu:0", ":2", "cpu:x"):
        with pytest.raises(InputError):
            parse_slots(bad)
