"""Throughput tables: extrapolating to GPU counts nobody measured, and laying one table on another."""

import numpy as np
import pytest

from apportion.core.throughputs import ThroughputTable

nan = np.nan


def table() -> ThroughputTable:
    """One kind on one type: 10, 18, 32, 56 steps/s on 1, 2, 4, 8 GPUs."""
    return ThroughputTable(
        kinds=("resnet/bs64",),
        gpu_types=("v100",),
        scales=(1, 2, 4, 8),
        steps_per_s=np.array([[[10.0, 18.0, 32.0, 56.0]]]),
    )


def test_16_gpus_keep_the_last_doublings_efficiency():
    wider = table().at_scales(np.array([1, 16]))

    assert wider.scales == (1, 2, 4, 8, 16)
    # last doubling 4 -> 8: e = 56 / (2 * 32) = 0.875, so T(16) = 2 * 0.875 * 56 = 98
    assert wider.steps_per_s[0, 0, 4] == pytest.approx(98.0)
    np.testing.assert_array_equal(wider.steps_per_s[0, 0, :4], [10.0, 18.0, 32.0, 56.0])


def test_32_gpus_apply_the_efficiency_once_per_doubling():
    wider = table().at_scales(np.array([32]))

    # two doublings past 8: 56 * 4 * 0.875**2 = 171.5
    assert wider.steps_per_s[0, 0, wider.scales.index(32)] == pytest.approx(171.5)


def test_efficiency_is_capped_at_one():
    superlinear = ThroughputTable(("k",), ("v100",), (1, 2), np.array([[[10.0, 25.0]]]))

    # 25 / (2 * 10) = 1.25, capped at 1: doubling again just doubles, T(4) = 50
    assert superlinear.at_scales(np.array([4])).steps_per_s[0, 0, -1] == pytest.approx(50.0)


def test_fewer_gpus_than_the_smallest_scale_keep_the_per_gpu_rate():
    from_two = ThroughputTable(("k",), ("v100",), (2, 4), np.array([[[18.0, 32.0]]]))

    # per-GPU rate at 2 GPUs is 9, so 1 GPU runs 9 steps/s
    assert from_two.at_scales(np.array([1])).steps_per_s[0, 0, 0] == pytest.approx(9.0)


def test_a_count_between_measured_scales_interpolates_between_their_rates():
    wider = table().at_scales(np.array([3, 6]))

    # 3 GPUs lies halfway between 2 (18 steps/s) and 4 (32): 25; 6 between 4 (32) and 8 (56): 44
    assert wider.steps_per_s[0, 0, wider.scales.index(3)] == pytest.approx(25.0)
    assert wider.steps_per_s[0, 0, wider.scales.index(6)] == pytest.approx(44.0)


def test_between_a_known_and_an_unknown_scale_the_smaller_scales_per_gpu_rate_holds():
    gap = ThroughputTable(("k",), ("v100",), (2, 4), np.array([[[18.0, np.nan]]]))

    # 18 / 2 = 9 per GPU, 3 GPUs -> 27
    assert gap.at_scales(np.array([3])).steps_per_s[0, 0, 1] == pytest.approx(27.0)


def test_unknown_stays_unknown_and_known_counts_change_nothing():
    t = ThroughputTable(("a", "b"), ("v100", "k80"), (1, 2), np.array([[[1.0, 2.0], [nan, nan]], [[3.0, 5.0], [1.0, 2.0]]]))

    assert t.at_scales(np.array([1, 2])) is t
    wider = t.at_scales(np.array([4]))
    assert np.isnan(wider.steps_per_s[0, 1, -1])  # a cannot run on k80 at any scale
    assert wider.steps_per_s[0, 0, -1] == pytest.approx(4.0)  # e = 1, linear
    assert wider.steps_per_s[1, 0, -1] == pytest.approx(5.0 * 2 * (5.0 / 6.0))


def test_merged_with_lets_the_other_table_win_where_both_know():
    mine = ThroughputTable(
        kinds=("a", "b"),
        gpu_types=("v100", "k80"),
        scales=(1, 2),
        steps_per_s=np.array([[[10.0, 20.0], [2.0, 4.0]], [[5.0, nan], [1.0, 2.0]]]),
        sources={"a": "mine", "b": "mine"},
    )
    theirs = ThroughputTable(
        kinds=("b", "c"),
        gpu_types=("v100", "a100"),
        scales=(2, 4),
        steps_per_s=np.array([[[9.0, nan], [nan, 30.0]], [[7.0, 14.0], [nan, nan]]]),
        sources={"b": "theirs"},
    )
    merged = mine.merged_with(theirs)

    assert merged.kinds == ("a", "b", "c")
    assert merged.gpu_types == ("v100", "k80", "a100")
    assert merged.scales == (1, 2, 4)

    def at(kind, gpu, scale):
        return merged.steps_per_s[merged.kinds.index(kind), merged.gpu_types.index(gpu), merged.scales.index(scale)]

    assert at("b", "v100", 2) == 9.0  # only theirs knew (mine had NaN)
    assert at("b", "v100", 1) == 5.0  # only mine knew
    assert at("a", "v100", 2) == 20.0  # theirs does not know kind a
    assert at("b", "a100", 4) == 30.0
    assert at("c", "v100", 4) == 14.0
    assert np.isnan(at("c", "k80", 1))
    assert np.isnan(at("b", "v100", 4))  # theirs says NaN: mine's silence stays
    assert merged.sources == {"a": "mine", "b": "theirs"}


def test_merged_with_overrides_a_number_both_know():
    mine = ThroughputTable(("a",), ("v100",), (1,), np.array([[[10.0]]]))
    theirs = ThroughputTable(("a",), ("v100",), (1,), np.array([[[12.0]]]))

    assert mine.merged_with(theirs).steps_per_s[0, 0, 0] == 12.0
    assert theirs.merged_with(mine).steps_per_s[0, 0, 0] == 10.0
    assert mine.steps_per_s[0, 0, 0] == 10.0  # neither input is changed


def test_a_table_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="shape"):
        ThroughputTable(("a",), ("v100",), (1, 2), np.zeros((1, 1, 3)))
    with pytest.raises(ValueError, match="ascending"):
        ThroughputTable(("a",), ("v100",), (2, 1), np.zeros((1, 1, 2)))


def test_a_table_measured_only_on_one_gpu_scales_linearly_like_an_unknown_half():
    """With no doubling measured there is no efficiency to keep; the code already treats an
    unknown half-scale rate as efficiency 1 (linear), and one measured scale should too."""
    one_scale = ThroughputTable(("k",), ("v100",), (1,), np.array([[[10.0]]]))
    unknown_half = ThroughputTable(("k",), ("v100",), (1, 2), np.array([[[nan, 10.0]]]))

    assert unknown_half.at_scales(np.array([4])).steps_per_s[0, 0, -1] == pytest.approx(20.0)
    # 16 GPUs of a kind measured only on 1 GPU: 16 * 10 = 160 steps/s, not 10
    assert one_scale.at_scales(np.array([16])).steps_per_s[0, 0, -1] == pytest.approx(160.0)


def test_pair_matrix_holds_each_members_rate_by_kind_and_type():
    table = ThroughputTable(("a", "b"), ("v100", "k80"), (1,), np.ones((2, 2, 1)),
                            {("a", "b", "k80"): (0.7, 0.4)})

    matrix = table.pair_matrix(("k80", "v100"))

    assert matrix.shape == (2, 2, 2)
    assert matrix[0, 1, 0] == 0.7 and matrix[1, 0, 0] == 0.4
    assert np.isnan(matrix[0, 1, 1]) and np.isnan(matrix[0, 0, 0])
