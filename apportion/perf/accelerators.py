"""The accelerator catalog: one entry per accelerator says everything the perf models know of it.

Peak dense FLOP/s per precision, memory, bandwidths and price are vendor datasheet numbers or
cloud list prices, named in ``sources``; peaks are dense (no 2:4 sparsity). Link bandwidths are
per GPU, one direction: ``intra_node_gbps`` between GPUs of one node (NVLink/NVSwitch or PCIe),
``inter_node_gbps`` from a GPU to other nodes (its share of the node's network adapters).

The chip figures the roofline of :mod:`apportion.perf.roofline` prices kernels with are in the
same entry, with their own source (``sm_source``): SMs and resident threads per SM, the boost
clock and what the FP32 units sustain in a training step, the fraction of the peak the best
large GEMM reaches (``gemm_ceiling``), FlashAttention-2's rate, and the host links
ZeRO-Offload crosses, and the names torch reports it by. A new accelerator is one entry here:
the transformer step model, the per-layer model of the job kinds and ``apportion profile``
know nothing of it but what the entry says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cached_property

TERA = 1e12
GB = 1e9

# "optimized GEMM can reach up to 80-90% of the theoretical maximum device throughput" (Dao,
# "FlashAttention-2", arXiv 2307.08691, §1): the lower end, for GPUs without a measured ceiling
DEFAULT_GEMM_CEILING = 0.80
# FlashAttention-2 reaches 50–73% of the A100's fp16/bf16 peak forward + backward (same paper);
# 0.50, its lower end, where no measurement of the GPU is at hand
DEFAULT_FLASH_ATTENTION_EFFICIENCY = 0.50
# a host link where the catalog has no figure: PCIe 3.0 x16 (16 GB/s per direction, PCI-SIG) and a
# GPU's share of a host's DRAM bandwidth (an estimate)
DEFAULT_HOST_LINK_BANDWIDTH = 16e9
DEFAULT_HOST_MEMORY_BANDWIDTH = 25e9


@dataclass(frozen=True)
class Accelerator:
    """One accelerator as the perf models see it: datasheet figures, links, price and its chip."""

    name: str
    peak_flops: dict[str, float]  # precision ("fp32", "tf32", "fp16", "bf16", "fp8") -> FLOP/s, dense
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    intra_node_bandwidth: float  # bytes/s per GPU per direction
    inter_node_bandwidth: float  # bytes/s per GPU per direction
    price_per_hour: float | None  # US$ per GPU-hour, on-demand list price; None where not listed
    # the chip: SMs (the CPU: its cores) each run one thread block, or one GEMM tile, at a time
    sms: int
    threads_per_sm: int = 0  # most resident threads per SM; 0 for a device without SMs (the CPU)
    boost_clock_mhz: float = 0.0  # a kernel's fixed cycles run at it; 0 for a device without SMs
    # what the FP32 units sustain in a training step, as fractions of the datasheet peak (see
    # roofline.sustained_peak): the lanes one clock's issue can fill, and the clock under full load
    fp32_issue_fraction: float = 1.0
    sustained_clock_fraction: float = 1.0
    gemm_ceiling: float = DEFAULT_GEMM_CEILING  # fraction of the peak the best large GEMM reaches
    flash_attention_efficiency: float = DEFAULT_FLASH_ATTENTION_EFFICIENCY  # of the fp16/bf16 peak
    host_link_bandwidth: float = DEFAULT_HOST_LINK_BANDWIDTH  # bytes/s to the host per GPU, one direction
    host_memory_bandwidth: float = DEFAULT_HOST_MEMORY_BANDWIDTH  # the GPU's share of the host's DRAM
    gpus_per_node: int = 8
    device_names: tuple[str, ...] = ()  # what torch calls it, lower case (``apportion profile``)
    sources: tuple[str, ...] = field(default=(), repr=False)
    sm_source: str = field(default="", repr=False)  # where the chip figures come from

    def peak(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; a precision without its own units runs at the fp32 rate."""
        return self.peak_flops.get(precision, self.peak_flops["fp32"])

    @cached_property
    def figures(self) -> tuple:
        """Every field, hashable: a cache key that tells apart two entries differing in any figure."""
        return tuple(tuple(sorted(value.items())) if isinstance(value, dict) else value
                     for value in (getattr(self, f.name) for f in fields(self)))

    def clock_hz(self, sustained: bool = True) -> float:
        """The clock the SMs hold in a training step (the K80: its base clock, see ``roofline.sustained_peak``)."""
        return self.boost_clock_mhz * 1e6 * (self.sustained_clock_fraction if sustained else 1.0)


def accelerator(name: str, *, fp32: float, tf32: float | None = None, fp16: float | None = None,
                bf16: float | None = None, fp8: float | None = None, memory_gb: float, bandwidth_gbs: float,
                intra_gbs: float, inter_gbs: float, price: float | None, gpus_per_node: int, sms: int,
                sources: Iterable[str], sm_source: str = "", **chip) -> Accelerator:
    """A catalog entry from datasheet units (TFLOP/s, GB, GB/s); ``chip`` takes the remaining
    chip and host fields of :class:`Accelerator` by name, in its units (``threads_per_sm``,
    ``boost_clock_mhz``, ``host_link_bandwidth`` in bytes/s …)."""
    peaks = {"fp32": fp32 * TERA}
    for precision, value in (("tf32", tf32), ("fp16", fp16), ("bf16", bf16), ("fp8", fp8)):
        if value is not None:
            peaks[precision] = value * TERA
    return Accelerator(name, peaks, memory_gb * GB, bandwidth_gbs * GB, intra_gbs * GB, inter_gbs * GB,
                       price, sms, gpus_per_node=gpus_per_node, sources=tuple(sources), sm_source=sm_source,
                       **chip)


_CUDA_GUIDE = ("CUDA C++ Programming Guide, Technical Specifications per Compute Capability: "
               "maximum resident threads per SM")
# Fraction of the bf16 peak the best large GEMM reaches, measured with mamf-finder.py under CUDA 12.1:
# Stas Bekman, "Machine Learning Engineering", "Maximum Achievable Matmul FLOPS comparison table"
# (github.com/stas00/ml-engineering, compute/accelerator/README.md). The H200 has the H100's
# compute die and clocks and gets the H100's figure.
_A100_GEMM_CEILING = 267.9 / 312
_H100_GEMM_CEILING = 792.1 / 989
# FlashAttention-2 forward + backward (Dao, arXiv 2307.08691): 50–73% of the A100's peak, the middle
# taken; "up to 335 TFLOPs/s" on an H100 SXM5 without Hopper-specific instructions (also for the H200)
_A100_FLASH_ATTENTION = 0.60
_H100_FLASH_ATTENTION = 335 / 989
# ZeRO-Offload's host links per GPU: PCIe 3.0/4.0/5.0 x16 = 16/32/64 GB/s per direction (PCI-SIG);
# DGX A100: 2 × AMD EPYC 7742, 8 channels DDR4-3200 each = 409.6 GB/s for 8 GPUs; DGX H100:
# 2 × Xeon 8480C, 8 channels DDR5-4800 each = 614.4 GB/s for 8 GPUs
_DGX_A100_HOST = {"host_link_bandwidth": 32e9, "host_memory_bandwidth": 51.2e9}
_DGX_H100_HOST = {"host_link_bandwidth": 64e9, "host_memory_bandwidth": 76.8e9}
_A100_SMS = ("NVIDIA A100 whitepaper: 108 SMs (6,912 FP32 cores), 1,410 MHz boost; "
             f"compute capability 8.0: 2,048 threads ({_CUDA_GUIDE})")

ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        accelerator(
            "k80", fp32=4.37, memory_gb=12, bandwidth_gbs=240, intra_gbs=8, inter_gbs=1.25, price=0.90,
            gpus_per_node=8, sms=13, threads_per_sm=2048, boost_clock_mhz=875,
            fp32_issue_fraction=128 / 192, sustained_clock_fraction=562 / 875,
            host_link_bandwidth=8e9, device_names=("k80",),
            sources=("NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s fp32 (boost), 24 GB, 480 GB/s per board of "
                     "two GPUs; halved per GPU", "PCIe 3.0 x16 shared by a board's two GPUs: ~8 GB/s each",
                     "AWS p2.xlarge (1 K80 GPU) on-demand, us-east-1: $0.90/h; 10 Gb/s network"),
            sm_source="NVIDIA Tesla K80 datasheet: 4,992 CUDA cores per two-GPU board = 2,496 "
                      "per GK210; Kepler GK110/GK210 whitepaper: 192 cores per SMX -> 13 SMX; "
                      f"compute capability 3.7: 2,048 threads ({_CUDA_GUIDE}); four warp schedulers "
                      "per SMX issue 4 × 32 = 128 lanes a clock without dual issue (whitepaper: two "
                      "independent instructions per warp are needed to fill all 192); the K80 datasheet "
                      "rates the board 8.73 TFLOP/s at its 875 MHz boost and 5.6 at its 562 MHz base clock",
        ),
        accelerator(
            "p100", fp32=9.3, fp16=18.7, memory_gb=16, bandwidth_gbs=732, intra_gbs=16, inter_gbs=2.0,
            price=1.46, gpus_per_node=4, sms=56, threads_per_sm=2048, boost_clock_mhz=1303,
            device_names=("p100",),
            sources=("NVIDIA Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOP/s fp32, 18.7 fp16, 732 GB/s",
                     "PCIe 3.0 x16: 16 GB/s per direction",
                     "Google Cloud P100 GPU on-demand: $1.46/GPU-hour; 16 Gb/s network"),
            sm_source="NVIDIA Tesla P100 whitepaper: 56 SMs (3,584 FP32 cores, 64 per SM); "
                      f"compute capability 6.0: 2,048 threads ({_CUDA_GUIDE}); P100 PCIe datasheet: "
                      "1,303 MHz boost",
        ),
        accelerator(
            "v100", fp32=15.7, fp16=125, memory_gb=16, bandwidth_gbs=900, intra_gbs=150, inter_gbs=3.1,
            price=3.06, gpus_per_node=8, sms=80, threads_per_sm=2048, boost_clock_mhz=1530,
            device_names=("v100",),
            sources=("NVIDIA V100 SXM2 datasheet: 15.7 TFLOP/s fp32, 125 tensor fp16, 900 GB/s, "
                     "NVLink 300 GB/s (both directions)",
                     "AWS p3.2xlarge (1 V100) on-demand: $3.06/h; p3.16xlarge 25 Gb/s network for 8 GPUs"),
            sm_source="NVIDIA Tesla V100 whitepaper: 80 SMs (5,120 FP32 cores), SXM2 boost 1,530 MHz; "
                      f"compute capability 7.0: 2,048 threads ({_CUDA_GUIDE})",
        ),
        accelerator(
            "t4", fp32=8.1, fp16=65, memory_gb=16, bandwidth_gbs=320, intra_gbs=16, inter_gbs=3.1,
            price=0.526, gpus_per_node=4, sms=40, threads_per_sm=1024, boost_clock_mhz=1590,
            device_names=("t4",),
            sources=("NVIDIA T4 datasheet: 8.1 TFLOP/s fp32, 65 mixed fp16, 16 GB, 320 GB/s, PCIe 3.0",
                     "AWS g4dn.xlarge (1 T4) on-demand: $0.526/h; up to 25 Gb/s"),
            sm_source="NVIDIA T4 datasheet: 2,560 CUDA cores; Turing whitepaper: 64 FP32 cores "
                      f"per SM -> 40 SMs, 1,590 MHz boost; compute capability 7.5: 1,024 threads "
                      f"({_CUDA_GUIDE})",
        ),
        accelerator(
            "a100-40gb", fp32=19.5, tf32=156, fp16=312, bf16=312, memory_gb=40, bandwidth_gbs=1555,
            intra_gbs=300, inter_gbs=25, price=4.10, gpus_per_node=8, sms=108, threads_per_sm=2048,
            boost_clock_mhz=1410, gemm_ceiling=_A100_GEMM_CEILING, flash_attention_efficiency=_A100_FLASH_ATTENTION,
            **_DGX_A100_HOST, device_names=("a100",),
            sources=("NVIDIA A100 datasheet (SXM4 40 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16/fp16, "
                     "1,555 GB/s, NVLink 600 GB/s (both directions)",
                     "DGX A100: one 200 Gb/s HDR InfiniBand adapter per GPU",
                     "AWS p4d.24xlarge (8 A100 40 GB) on-demand: $32.77/h, $4.10/GPU-hour"),
            sm_source=_A100_SMS,
        ),
        accelerator(
            "a100-80gb", fp32=19.5, tf32=156, fp16=312, bf16=312, memory_gb=80, bandwidth_gbs=2039,
            intra_gbs=300, inter_gbs=25, price=5.12, gpus_per_node=8, sms=108, threads_per_sm=2048,
            boost_clock_mhz=1410, gemm_ceiling=_A100_GEMM_CEILING, flash_attention_efficiency=_A100_FLASH_ATTENTION,
            **_DGX_A100_HOST, device_names=("a100-sxm4-80gb", "a100 80gb"),
            sources=("NVIDIA A100 datasheet (SXM4 80 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16/fp16, "
                     "2,039 GB/s, NVLink 600 GB/s (both directions)",
                     "DGX A100: one 200 Gb/s HDR InfiniBand adapter per GPU",
                     "AWS p4de.24xlarge (8 A100 80 GB) on-demand: $40.97/h, $5.12/GPU-hour"),
            sm_source=_A100_SMS,
        ),
        accelerator(
            "h100", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, memory_gb=80, bandwidth_gbs=3350,
            intra_gbs=450, inter_gbs=50, price=12.29, gpus_per_node=8, sms=132, threads_per_sm=2048,
            boost_clock_mhz=1980, gemm_ceiling=_H100_GEMM_CEILING, flash_attention_efficiency=_H100_FLASH_ATTENTION,
            **_DGX_H100_HOST, device_names=("h100",),
            sources=("NVIDIA H100 SXM5 datasheet: 67 TFLOP/s fp32, 494.5 tf32, 989.5 bf16/fp16, 1,979 fp8 "
                     "(dense), 80 GB, 3.35 TB/s, NVLink 900 GB/s (both directions)",
                     "DGX H100: one 400 Gb/s NDR InfiniBand adapter per GPU",
                     "AWS p5.48xlarge (8 H100) on-demand: $98.32/h, $12.29/GPU-hour"),
            sm_source="NVIDIA H100 whitepaper: H100 SXM5 132 SMs (16,896 FP32 cores), 1,980 MHz "
                      f"boost; compute capability 9.0: 2,048 threads ({_CUDA_GUIDE})",
        ),
        accelerator(
            "h200", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, memory_gb=141, bandwidth_gbs=4800,
            intra_gbs=450, inter_gbs=50, price=None, gpus_per_node=8, sms=132, threads_per_sm=2048,
            boost_clock_mhz=1980, gemm_ceiling=_H100_GEMM_CEILING, flash_attention_efficiency=_H100_FLASH_ATTENTION,
            **_DGX_H100_HOST, device_names=("h200",),
            sources=("NVIDIA H200 SXM datasheet: compute as H100 SXM, 141 GB, 4.8 TB/s, NVLink 900 GB/s",
                     "DGX H200: one 400 Gb/s NDR InfiniBand adapter per GPU",
                     "no on-demand list price used: price_per_hour is None"),
            sm_source="assumed the H100 SXM5's 132 SMs and 1,980 MHz boost: the H200 datasheet gives "
                      f"the same compute figures; compute capability 9.0: 2,048 threads ({_CUDA_GUIDE})",
        ),
        accelerator(
            "cpu", fp32=0.19, memory_gb=16, bandwidth_gbs=20, intra_gbs=10, inter_gbs=1.25, price=0.0,
            gpus_per_node=2, sms=2,
            sources=("a 2-core x86 host as a slow accelerator: 2 cores × 32 fp32 FLOP/cycle (AVX2 FMA) × "
                     "3 GHz ≈ 0.19 TFLOP/s; ~20 GB/s DRAM bandwidth; an estimate from those figures, "
                     "not a datasheet"),
            sm_source="the catalog's 2-core host: one GEMM tile at a time per core; no SMs' threads or clock",
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


def device_accelerator(device_name: str) -> str | None:
    """The catalog name of the accelerator torch calls ``device_name`` (the entry whose
    ``device_names`` has the longest part of it: "NVIDIA A100-SXM4-80GB" is the a100-80gb, not the
    40 GB part that "a100" alone names); None when no entry knows it."""
    name = device_name.lower()
    found = [(len(part), acc.name)
             for acc in ACCELERATORS.values() for part in acc.device_names if part in name]
    return max(found)[1] if found else None


def list_price(gpu_type: str) -> float | None:
    """The on-demand list price per GPU-hour of ``gpu_type`` (a catalog name or alias); None where the catalog has none."""
    entry = ACCELERATORS.get(ALIASES.get(gpu_type, gpu_type))
    if entry is None or not entry.price_per_hour:
        return None
    return float(entry.price_per_hour)


def list_prices(gpu_types: Iterable[str]) -> dict[str, float]:
    """Each of ``gpu_types`` that has a list price, with it: the prices min-cost needs of a cluster."""
    return {gpu_type: price for gpu_type in gpu_types if (price := list_price(gpu_type)) is not None}
