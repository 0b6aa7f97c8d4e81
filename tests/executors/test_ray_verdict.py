"""When a rank of a gang crashes, the Ray executor asks every rank's node before it says how the
attempt ended: a node Ray counts dead, an actor gone, or one that does not answer makes it lost
(never the job's crash), whatever the other ranks did first. A stand-in for Ray plays the race
of issue 41: the rank on the live node exits 1 on the broken collective while Ray has not yet
said that the other rank's node is gone."""

from __future__ import annotations

import time

from apportion.executors.base import Attempt, Exit
from apportion.executors.ray_executor import RayExecutor, _Attempt, _NoGroup


class RayError(Exception):
    pass


class Ref:
    """An ObjectRef the test resolves: a value, an error, or nothing yet."""

    def __init__(self, value=None, error: Exception | None = None, ready: bool = True) -> None:
        self.value, self.error, self.ready = value, error, ready


class Exceptions:
    RayError = RayError


class FakeRay:
    exceptions = Exceptions

    def __init__(self, alive: set[str]) -> None:
        self.alive = alive

    def wait(self, refs, num_returns, timeout):
        return [r for r in refs if r.ready], [r for r in refs if not r.ready]

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, actor, no_restart=True):
        actor.killed = True

    def nodes(self):
        return [{"NodeID": n, "Alive": True} for n in self.alive] + [{"NodeID": "b" * 56, "Alive": False}]


class Remote:
    def __init__(self, make) -> None:
        self.make = make

    def remote(self, *args):
        return self.make(*args)


class Actor:
    """A replica on ``node``: ``answers`` says how its where() ping goes (a Ref's keyword arguments)."""

    def __init__(self, node: str, **answers) -> None:
        self.killed = False
        self.where = Remote(lambda: Ref({"node_id": node, "ip": "10.0.0.1"}, **answers))
        self.signal = Remote(lambda signum: None)


def executor_with(tmp_path, actors: list[Actor], codes: list[Ref], alive: set[str], verdict_s: float = 0.3):
    executor = RayExecutor(tmp_path, verdict_s=verdict_s)
    executor._ray = FakeRay(alive)
    waits = {ref: rank for rank, ref in enumerate(codes)}
    executor._tracked[7] = _Attempt(Attempt(7, 1, None, None, ("v100:0", "v100:1")), actors, _NoGroup(), waits,
                                    placed=True, started=time.monotonic())
    return executor


A, B = "a" * 56, "b" * 56  # node ids: A alive, B dead once Ray says so


def test_a_rank_crashing_while_the_other_ranks_node_stops_answering_is_a_lost_node(tmp_path):
    crashed, pending = Ref({"code": 1}), Ref(ready=False)  # rank 0: exit 1 (gloo); rank 1: nothing yet
    executor = executor_with(tmp_path, [Actor(A), Actor(B, ready=False)], [crashed, pending], alive={A, B})

    assert executor.poll() == []  # not a crash yet: rank 1's node has not answered
    time.sleep(0.35)
    assert executor.poll() == [Exit(7, 1, None, "its Ray node stopped answering (rank 1, 0.3 s)")]


def test_a_rank_crashing_beside_a_rank_whose_actor_is_gone_is_a_lost_node(tmp_path):
    crashed, pending = Ref({"code": 1}), Ref(ready=False)
    gone = RayError("The actor died because its node has died. Node Id: bbbb")
    executor = executor_with(tmp_path, [Actor(A), Actor(B, error=gone)], [crashed, pending], alive={A, B})

    assert executor.poll() == [Exit(7, 1, None, "its Ray node died")]


def test_a_rank_crashing_beside_a_rank_on_a_node_ray_counts_dead_is_a_lost_node(tmp_path):
    crashed, ended = Ref({"code": 1}), Ref({"code": 1})  # both ranks reported an exit
    executor = executor_with(tmp_path, [Actor(A), Actor(B)], [crashed, ended], alive={A})

    assert executor.poll() == [Exit(7, 1, None, f"its Ray node {B[:8]} died")]


def test_a_crash_with_every_rank_answering_from_a_live_node_is_the_jobs_crash(tmp_path):
    crashed, running = Ref({"code": 3}), Ref(ready=False)
    executor = executor_with(tmp_path, [Actor(A), Actor(B)], [crashed, running], alive={A, B})

    assert executor.poll() == [Exit(7, 1, 3)]


def test_a_rank_whose_replica_saw_its_raylet_go_is_on_a_lost_node_before_ray_says_so(tmp_path):
    crashed, running = Ref({"code": 1}), Ref(ready=False)
    executor = executor_with(tmp_path, [Actor(A), Actor(B)], [crashed, running], alive={A, B})
    executor._tracked[7].actors[1].where = Remote(lambda: Ref({"node_id": B, "ip": "10.0.0.2", "raylet": False}))

    assert executor.poll() == [Exit(7, 1, None, f"its Ray node {B[:8]} died")]
