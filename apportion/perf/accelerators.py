"""The accelerator catalog: peak dense FLOP/s per precision, memory, bandwidths, price.

Every figure is a vendor datasheet number or a cloud list price, named in ``source``. Peaks
are dense (no 2:4 sparsity). Link bandwidths are per GPU, one direction: ``intra_node_gbps``
between GPUs of one node (NVLink/NVSwitch or PCIe), ``inter_node_gbps`` from a GPU to other
nodes (its share of the node's network adapters).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

TERA = 1e12
GB = 1e9


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: dict[str, float]  # precision ("fp32", "tf32", "fp16", "bf16", "fp8") -> FLOP/s, dense
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    intra_node_bandwidth: float  # bytes/s per GPU per direction
    inter_node_bandwidth: float  # bytes/s per GPU per direction
    price_per_hour: float | None  # US$ per GPU-hour, on-demand list price; None where not listed
    gpus_per_node: int = 8
    sources: tuple[str, ...] = field(default=(), repr=False)

    def peak(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; a precision without its own units runs at the fp32 rate."""
        return self.peak_flops.get(precision, self.peak_flops["fp32"])


def _accelerator(name, *, fp32, tf32=None, fp16=None, bf16=None, fp8=None, memory_gb, bandwidth_gbs,
                 intra_gbs, inter_gbs, price, gpus_per_node, sources) -> Accelerator:
    peaks = {"fp32": fp32 * TERA}
    for precision, value in (("tf32", tf32), ("fp16", fp16), ("bf16", bf16), ("fp8", fp8)):
        if value is not None:
            peaks[precision] = value * TERA
    return Accelerator(name, peaks, memory_gb * GB, bandwidth_gbs * GB, intra_gbs * GB, inter_gbs * GB,
                       price, gpus_per_node, tuple(sources))


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        _accelerator(
            "k80", fp32=4.37, memory_gb=12, bandwidth_gbs=240, intra_gbs=8, inter_gbs=1.25, price=0.90,
            gpus_per_node=8,
            sources=("NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s fp32 (boost), 24 GB, 480 GB/s per board of "
                     "two GPUs; halved per GPU", "PCIe 3.0 x16 shared by a board's two GPUs: ~8 GB/s each",
                     "AWS p2.xlarge (1 K80 GPU) on-demand, us-east-1: $0.90/h; 10 Gb/s network"),
        ),
        _accelerator(
            "p100", fp32=9.3, fp16=18.7, memory_gb=16, bandwidth_gbs=732, intra_gbs=16, inter_gbs=2.0,
            price=1.46, gpus_per_node=4,
            sources=("NVIDIA Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOP/s fp32, 18.7 fp16, 732 GB/s",
                     "PCIe 3.0 x16: 16 GB/s per direction",
                     "Google Cloud P100 GPU on-demand: $1.46/GPU-hour; 16 Gb/s network"),
        ),
        _accelerator(
            "v100", fp32=15.7, fp16=125, memory_gb=16, bandwidth_gbs=900, intra_gbs=150, inter_gbs=3.1,
            price=3.06, gpus_per_node=8,
            sources=("NVIDIA V100 SXM2 datasheet: 15.7 TFLOP/s fp32, 125 tensor fp16, 900 GB/s, "
                     "NVLink 300 GB/s (both directions)",
                     "AWS p3.2xlarge (1 V100) on-demand: $3.06/h; p3.16xlarge 25 Gb/s network for 8 GPUs"),
        ),
        _accelerator(
            "t4", fp32=8.1, fp16=65, memory_gb=16, bandwidth_gbs=320, intra_gbs=16, inter_gbs=3.1,
            price=0.526, gpus_per_node=4,
            sources=("NVIDIA T4 datasheet: 8.1 TFLOP/s fp32, 65 mixed fp16, 16 GB, 320 GB/s, PCIe 3.0",
                     "AWS g4dn.xlarge (1 T4) on-demand: $0.526/h; up to 25 Gb/s"),
        ),
        _accelerator(
            "a100-40gb", fp32=19.5, tf32=156, fp16=312, bf16=312, memory_gb=40, bandwidth_gbs=1555,
            intra_gbs=300, inter_gbs=25, price=4.10, gpus_per_node=8,
            sources=("NVIDIA A100 datasheet (SXM4 40 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16/fp16, "
                     "1,555 GB/s, NVLink 600 GB/s (both directions)",
                     "DGX A100: one 200 Gb/s HDR InfiniBand adapter per GPU",
                     "AWS p4d.24xlarge (8 A100 40 GB) on-demand: $32.77/h, $4.10/GPU-hour"),
        ),
        _accelerator(
            "a100-80gb", fp32=19.5, tf32=156, fp16=312, bf16=312, memory_gb=80, bandwidth_gbs=2039,
            intra_gbs=300, inter_gbs=25, price=5.12, gpus_per_node=8,
            sources=("NVIDIA A100 datasheet (SXM4 80 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16/fp16, "
                     "2,039 GB/s, NVLink 600 GB/s (both directions)",
                     "DGX A100: one 200 Gb/s HDR InfiniBand adapter per GPU",
                     "AWS p4de.24xlarge (8 A100 80 GB) on-demand: $40.97/h, $5.12/GPU-hour"),
        ),
        _accelerator(
            "h100", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, memory_gb=80, bandwidth_gbs=3350,
            intra_gbs=450, inter_gbs=50, price=12.29, gpus_per_node=8,
            sources=("NVIDIA H100 SXM5 datasheet: 67 TFLOP/s fp32, 494.5 tf32, 989.5 bf16/fp16, 1,979 fp8 "
                     "(dense), 80 GB, 3.35 TB/s, NVLink 900 GB/s (both directions)",
                     "DGX H100: one 400 Gb/s NDR InfiniBand adapter per GPU",
                     "AWS p5.48xlarge (8 H100) on-demand: $98.32/h, $12.29/GPU-hour"),
        ),
        _accelerator(
            "h200", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, memory_gb=141, bandwidth_gbs=4800,
            intra_gbs=450, inter_gbs=50, price=None, gpus_per_node=8,
            sources=("NVIDIA H200 SXM datasheet: compute as H100 SXM, 141 GB, 4.8 TB/s, NVLink 900 GB/s",
                     "DGX H200: one 400 Gb/s NDR InfiniBand adapter per GPU",
                     "no on-demand list price used: price_per_hour is None"),
        ),
        _accelerator(
            "cpu", fp32=0.19, memory_gb=16, bandwidth_gbs=20, intra_gbs=10, inter_gbs=1.25, price=0.0,
            gpus_per_node=2,
            sources=("a 2-core x86 host as a slow accelerator: 2 cores × 32 fp32 FLOP/cycle (AVX2 FMA) × "
                     "3 GHz ≈ 0.19 TFLOP/s; ~20 GB/s DRAM bandwidth; an estimate from those figures, "
                     "not a datasheet"),
        ),
    )
}

# the simulator's catalog names a100 for the 40 GB part
ALIASES = {"a100": "a100-40gb"}


def get_accelerator(name: str) -> Accelerator:
    """The accelerator called ``name``; unknown names list the known ones."""
    key = ALIASES.get(name.lower(), name.lower())
    try:
        return ACCELERATORS[key]
    except KeyError:
        raise ValueError(f"unknown GPU type '{name}' (known: {', '.join(ACCELERATORS)})") from None


def list_price(gpu_type: str) -> float | None:
    """The on-demand list price per GPU-hour of ``gpu_type`` (a catalog name or alias); None where the catalog has none."""
    accelerator = ACCELERATORS.get(ALIASES.get(gpu_type, gpu_type))
    if accelerator is None or not accelerator.price_per_hour:
        return None
    return float(accelerator.price_per_hour)


def list_prices(gpu_types: Iterable[str]) -> dict[str, float]:
    """Each of ``gpu_types`` that has a list price, with it: the prices min-cost needs of a cluster."""
    return {gpu_type: price for gpu_type in gpu_types if (price := list_price(gpu_type)) is not None}
