"""The accelerator catalog: one entry is all both perf models know of a GPU."""

import dataclasses

import pytest

from apportion.perf import Layout, get_preset, predict
from apportion.perf.accelerators import ACCELERATORS, accelerator, device_accelerator, get_accelerator
from apportion.perf.kinds import predict_step_time

# a GPU nobody sells, given the v100's figures in the catalog's units
V100_FIGURES = dict(fp32=15.7, fp16=125, memory_gb=16, bandwidth_gbs=900, intra_gbs=150, inter_gbs=3.1,
                    price=None, gpus_per_node=8, sms=80, threads_per_sm=2048, boost_clock_mhz=1530,
                    sources=("a made-up GPU: the v100 SXM2's datasheet figures",))
GPT = get_preset("gpt3-1.3b")
LAYOUT = Layout(tp=2, pp=2, dp=2, micro_batch=2, global_batch=32, recompute="full", precision="fp16")


@pytest.fixture
def made_up(monkeypatch):
    """Adds catalog entries for the test, as one more line of ACCELERATORS would."""
    def add(name: str, **changes) -> str:
        monkeypatch.setitem(ACCELERATORS, name, accelerator(name, **{**V100_FIGURES, **changes}))
        return name
    return add


def test_a_gpu_added_as_one_catalog_entry_is_priced_by_the_step_model_and_the_kind_model(made_up):
    gpu = made_up("x100", device_names=("x100",))

    # the v100's figures under another name: every prediction is the v100's, to the last bit
    for kind in ("resnet50/bs64", "lm/bs20", "a3c"):
        assert predict_step_time(kind, gpu) == predict_step_time(kind, "v100")
    assert predict(GPT, LAYOUT, gpu).step_time_s == predict(GPT, LAYOUT, "v100").step_time_s
    assert device_accelerator("NVIDIA X100-SXM 32GB") == gpu


def test_every_figure_a_prediction_uses_comes_from_the_entry(made_up):
    fast_memory = made_up("x100-hbm3", bandwidth_gbs=1800)
    low_ceiling = made_up("x100-slow-gemm", gemm_ceiling=0.4)
    slow_clock = made_up("x100-slow-clock", boost_clock_mhz=765)

    # an LSTM step of small kernels is mostly memory and fixed per-kernel cycles
    assert predict_step_time("lm/bs20", fast_memory) < predict_step_time("lm/bs20", "v100")
    assert predict_step_time("lm/bs20", slow_clock) > predict_step_time("lm/bs20", "v100")
    # the transformer's GEMMs run at the entry's ceiling: half of it, and they take longer
    assert predict(GPT, LAYOUT, low_ceiling).step_time_s > 1.5 * predict(GPT, LAYOUT, "v100").step_time_s


def test_a_catalog_entry_keeps_its_chip_figures_in_the_units_of_a_datasheet():
    v100 = get_accelerator("v100")

    assert accelerator("v100", **V100_FIGURES) == dataclasses.replace(
        v100, price_per_hour=None, device_names=(), sources=V100_FIGURES["sources"], sm_source="")
    assert v100.clock_hz() == 1.53e9
    assert get_accelerator("k80").clock_hz() == pytest.approx(562e6)  # held at its base clock in a training step
    assert get_accelerator("k80").clock_hz(sustained=False) == 875e6


@pytest.mark.parametrize("device, gpu", [
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),  # "a100" alone names the 40 GB part
    ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"),
    ("Tesla K80", "k80"),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_the_device_torch_reports_is_found_by_the_longest_name_an_entry_gives(device, gpu):
    assert device_accelerator(device) == gpu
