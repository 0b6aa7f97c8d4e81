"""A job's cores and memory on Ray, without Ray: its bundles, the nodes that could hold them, and why none could."""

from __future__ import annotations

from apportion.executors.ray_nodes import SlotResource, declared
from apportion.executors.ray_room import (GIB, bundles_on, job_bundle, most_on_one_node, node_sizes, refusal,
                                         room_by_type)


def node(alive=True, **resources):
    return {"Alive": alive, "Resources": resources, "NodeManagerAddress": "10.0.0.1"}


V100 = declared("v100", accelerator_type="V100")
CPU = SlotResource("cpu", "CPU")
V100_NODE = node(CPU=32, GPU=4, memory=256 * GIB, **{"accelerator_type:V100": 1})  # 8 cores and 64 GiB a slot
SMALL_V100_NODE = node(CPU=8, GPU=4, memory=64 * GIB, **{"accelerator_type:V100": 1})


def test_a_job_that_asks_nothing_keeps_the_slots_bundle():
    assert job_bundle(V100, 4) == V100.bundle() == {"GPU": 1.0, "accelerator_type:V100": 0.001}


def test_a_jobs_cores_and_memory_are_spread_evenly_over_its_bundles():
    # 16 cores and 32 GiB over 4 GPUs: 4 cores and 8 GiB (8 × 2**30 bytes) beside each
    assert job_bundle(V100, 4, cpus=16, memory_gb=32) == {"GPU": 1.0, "accelerator_type:V100": 0.001,
                                                         "CPU": 4.0, "memory": 8.0 * 2**30}
    # 8 cores over 3 GPUs: 2.6666 each (Ray's 4 decimals, rounded down so that three fit in 8)
    assert job_bundle(V100, 3, cpus=8)["CPU"] == 2.6666
    assert 3 * job_bundle(V100, 3, cpus=8)["CPU"] <= 8


def test_on_cpu_slots_the_asked_cores_are_added_to_the_slots_own():
    assert job_bundle(CPU, 2, cpus=4) == {"CPU": 3.0}  # each slot is one core, and 2 more beside it


def test_a_node_holds_as_many_bundles_as_its_scarcest_resource_allows():
    assert bundles_on(V100_NODE["Resources"], job_bundle(V100, 1)) == 4  # its 4 GPUs
    assert bundles_on(V100_NODE["Resources"], job_bundle(V100, 2, cpus=32)) == 2  # 16 cores each: 2 in 32
    assert bundles_on(V100_NODE["Resources"], job_bundle(V100, 1, memory_gb=100)) == 2  # 100 GiB each: 2 in 256
    assert bundles_on(node(CPU=32, GPU=4)["Resources"], job_bundle(V100, 1)) == 0  # not a V100 node


def test_one_node_holds_a_job_whole_only_when_it_has_room_for_all_its_bundles():
    nodes = [V100_NODE, SMALL_V100_NODE, node(alive=False, CPU=64, GPU=4, **{"accelerator_type:V100": 1})]
    assert most_on_one_node(nodes, job_bundle(V100, 4)) == 4
    assert most_on_one_node(nodes, job_bundle(V100, 4, cpus=64)) == 2  # 16 a GPU: 2 on the 32-core node


def test_the_nodes_sizes_are_listed_per_type_as_their_slots_are():
    assert node_sizes([V100_NODE, node(CPU=4), SMALL_V100_NODE], [V100]) == {"v100": [(32, 256.0), (8, 64.0)]}


def test_a_job_that_fits_nowhere_is_refused_naming_the_field():
    nodes = [V100_NODE, SMALL_V100_NODE]

    field, message = refusal(nodes, [V100], 4, cpus=129, memory_gb=None)  # 32.25 a GPU: no node holds one
    assert field == "cpus"
    assert message == ("asks for 129 CPU cores beside its 4 slots; no Ray nodes have room for them:"
                       " the largest v100 node has 32 CPU cores for 4 slots")
    field, message = refusal(nodes, [V100], 1, cpus=None, memory_gb=300)
    assert field == "memory_gb"
    assert message == ("asks for 300 GiB of memory beside its 1 slot; no Ray nodes have room for them:"
                       " the largest v100 node has 256 GiB of memory for 4 slots")


def test_a_job_spread_over_several_nodes_fits_where_each_holds_a_part():
    nodes = [V100_NODE, V100_NODE]
    assert refusal(nodes, [V100], 4, cpus=64, memory_gb=None) is None  # 16 a GPU: two on each node
    assert refusal(nodes, [V100], 4, cpus=65, memory_gb=None)[0] == "cpus"  # 16.25: one on each, not four


def test_cores_and_memory_that_each_fit_but_not_together_name_both():
    # one node has the cores but not the memory, the other the memory but not the cores
    nodes = [node(CPU=32, GPU=1, memory=4 * GIB, **{"accelerator_type:V100": 1}),
             node(CPU=2, GPU=1, memory=64 * GIB, **{"accelerator_type:V100": 1})]
    field, message = refusal(nodes, [V100], 1, cpus=8, memory_gb=8)
    assert field == "cpus" and message.startswith("asks for 8 CPU cores and 8 GiB of memory beside its 1 slot;")


def test_a_cpu_slot_needs_its_own_core_beside_the_ones_asked():
    field, message = refusal([node(CPU=4)], [CPU], 1, cpus=4, memory_gb=None)  # 1 + 4 cores on a 4-core node
    assert field == "cpus"
    assert message.endswith("the largest cpu node has 4 CPU cores for 4 slots, one of them each slot's own")
    assert refusal([node(CPU=4)], [CPU], 1, cpus=3, memory_gb=None) is None


def test_any_allowed_type_that_fits_is_enough_and_a_type_without_live_nodes_is_not_judged():
    a100 = declared("a100", accelerator_type="A100")
    a100_node = node(CPU=128, GPU=8, memory=1024 * GIB, **{"accelerator_type:A100": 1})
    assert refusal([SMALL_V100_NODE, a100_node], [V100, a100], 4, cpus=64, memory_gb=None) is None
    assert refusal([SMALL_V100_NODE], [V100, a100], 4, cpus=64, memory_gb=None) is None  # a100 nodes may join
    assert refusal([SMALL_V100_NODE], [V100], 4, cpus=None, memory_gb=None) is None  # it asks nothing


def test_the_room_a_round_counts_asks_against_sums_each_types_nodes_and_splits_a_node_by_its_slots():
    k80 = SlotResource("k80", "k80")
    mixed = node(CPU=12, memory=48 * GIB, k80=2, **{"accelerator_type:V100": 1}, GPU=1)  # 1 V100 slot, 2 k80 slots
    room = room_by_type([V100_NODE, SMALL_V100_NODE, node(alive=False, CPU=64, GPU=4), mixed], [V100, k80, CPU])
    # v100: 32 + 8 cores and 256 + 64 GiB, and a third of the mixed node's 12 cores and 48 GiB (1 of its 3 slots)
    assert room["v100"] == (44.0, 336.0)
    assert room["k80"] == (8.0, 32.0)
    assert room["cpu"] == (None, None)  # a cpu slot is itself a core: only Ray's placement can weigh the asks


def test_the_executor_says_how_many_slots_of_each_type_each_live_node_holds(tmp_path):
    """What a policy that sizes jobs is told of a node (``RayExecutor.slots_per_node``): a type's slots lie on
    several nodes, a dead one counts none; None while Ray cannot be asked."""
    from apportion.executors.ray_executor import RayExecutor

    executor = RayExecutor(tmp_path)
    executor.offer([V100, CPU])
    executor.nodes = lambda: [V100_NODE, node(CPU=8, GPU=2, **{"accelerator_type:V100": 1}),
                              node(alive=False, CPU=8, GPU=8, **{"accelerator_type:V100": 1})]
    assert executor.slots_per_node() == {"v100": [4, 2], "cpu": [32, 8]}

    def down():
        raise OSError("no Ray at 10.0.0.1:6379")

    executor.nodes = down
    assert executor.slots_per_node() is None
