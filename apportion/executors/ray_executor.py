"""Run attempts on a Ray cluster: a placement group of one bundle per slot, one actor per bundle.

``start`` creates a detached placement group (``STRICT_PACK`` when the job fits on one node of
its type, else ``PACK``) whose bundles ask for one slot of the job's GPU type each
(``ray_nodes.SlotResource``) and an even share of the CPU cores and memory its job file asks for
(``ray_room.job_bundle``), and in it one named, detached ``Replica`` actor per bundle
(``ray_replica.py``), which holds its bundle's CPUs and memory: rank 0 picks the rendezvous
address, then every replica starts the job's process on its node. Nothing here blocks on Ray:
placement, rendezvous and launch happen as Ray schedules them, and ``poll`` collects the
replicas' ends.

- An attempt ends when all its replicas have ended (exit 0 or 75 from each), or when one dies
  with its node (``Exit.lost``), or when one crashes and Ray has given its verdict on every
  rank's node (``_NodeVerdict``): a rank whose node died (or whose actor does not answer within
  ``verdict_s``) makes the attempt lost, whatever the other ranks did first (they exit 1 on the
  broken collective before Ray reports the dead node); otherwise it crashed (its code). What is
  left of it is killed, and its placement group removed.
- An attempt whose placement group Ray has not placed ``place_wait_s`` after its start (the cores
  or memory it asks are held by other jobs' bundles) is withdrawn: its ``Exit`` says so
  (``unplaced``), and the server puts the job back to wait for a round, counting no retry.
- ``terminate`` and ``kill`` signal every replica's process group; an attempt whose placement
  group is not placed yet is simply withdrawn (it never ran: no exit code, ``unplaced``).
- Actors are named ``apportion.JOB.ATTEMPT.RANK`` in the server's own Ray namespace and are
  detached, so a server killed with ``kill -9`` leaves them running; the next one finds them
  (``scan``), waits on them again (``adopt``) or kills them (``kill_attempt``).

Logs and exit records go to ``STATE_DIR/jobs/ID/attempt-N.{log,exit}`` (rank R > 0:
``attempt-N.rank-R.*``) where ``STATE_DIR`` is a directory every node and the server can
reach. Ray is imported only here and on the nodes: the rest of apportion never loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from apportion.executors.base import Attempt, Exit
from apportion.executors.local.executor import tail
from apportion.executors.ray_connect import join
from apportion.executors.ray_nodes import SlotResource, capacity
from apportion.executors.ray_replica import Replica
from apportion.executors.ray_room import job_bundle, most_on_one_node, refusal, room_by_type

PREFIX = "apportion."
PREEMPTED = 75
RAY_CALL_S = 10.0  # the longest the replicas' answers (info, at a restart) may take before they count as gone
PLACE_WAIT_S = 60.0  # an attempt whose placement group Ray has not placed this long after its start is withdrawn
VERDICT_S = 5.0  # after a rank crashes, the longest its attempt waits for every rank's node to answer


def default_namespace(state_dir: str | Path) -> str:
    """The Ray namespace of one state directory's attempts: two servers never see each other's."""
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:12]
    return f"apportion-{digest}"


def slot_ids(counts: dict[str, int]) -> list[tuple[str, str]]:
    """``(slot id, gpu type)`` of every slot: ``v100:0``, ``v100:1``, … (Ray picks the node)."""
    return [(f"{gpu_type}:{i}", gpu_type) for gpu_type, n in counts.items() for i in range(n)]


def slot_type(slot: str) -> str:
    """``v100:3`` → ``v100``."""
    return slot.rpartition(":")[0] or slot


@dataclass
class _Attempt:
    """An attempt this executor watches: its actors, placement group and the replicas' ends so far."""

    attempt: Attempt
    actors: list
    group: object  # its PlacementGroup
    waits: dict  # ObjectRef of replica r's wait() -> r
    codes: dict[int, int | None] = field(default_factory=dict)
    lost: str = ""
    signalled: int | None = None  # the last signal sent to it
    placed: bool = False  # Ray placed its group (known once asked: at its deadline, or when a replica ended)
    started: float = 0.0  # time.monotonic() at its start
    waiting: str = ""  # what it waits for while not placed: "waiting for Ray to place 4 CPU cores beside its slots"
    wheres: list = field(default_factory=list)  # ObjectRef of replica r's where() at its start (its node)
    nodes: tuple[str, ...] = ()  # each rank's node, once known: "10.0.0.5/3f2a9c1b"
    verdict: _NodeVerdict | None = None  # a rank crashed: each rank's node asked whether it is there


@dataclass
class _NodeVerdict:
    """A rank crashed: every rank's actor is asked where it is (``where()``). An answer names a node Ray
    still counts alive; an error, a dead node, or no answer by ``deadline`` (time.monotonic()) means
    the rank's node is lost, and so is the attempt."""

    pings: dict  # ObjectRef of replica r's where() -> r
    deadline: float
    answers: dict = field(default_factory=dict)  # rank -> {"node_id", "ip"}


class RayExecutor:
    """The ``Executor`` on a Ray cluster. ``types`` says how each GPU type's slots are asked of Ray."""

    def __init__(self, state_dir: str | Path, *, address: str | None = None, types: Sequence[SlotResource] = (),
                 namespace: str | None = None, place_wait_s: float = PLACE_WAIT_S, verdict_s: float = VERDICT_S) -> None:
        self.state_dir = Path(os.path.realpath(state_dir))
        self.address = address
        self.place_wait_s = place_wait_s
        self.verdict_s = verdict_s
        self.types = {t.gpu_type: t for t in types}
        self.namespace = namespace or default_namespace(self.state_dir)
        self._ray = None
        self._replica = None  # Replica as a Ray actor class
        self._tracked: dict[int, _Attempt] = {}
        self._found: dict[tuple[int, int], tuple[list, dict]] = {}  # (job, attempt) -> (actors, rank 0's info), by scan
        self._ended: list[Exit] = []

    # Ray ---------------------------------------------------------------------------------

    def connect(self):
        """Join the Ray cluster at ``address`` in this server's namespace (once); OSError if it cannot."""
        if self._ray is not None:
            return self._ray
        ray = join(self.address, self.namespace)
        current = ray.get_runtime_context().namespace
        if current != self.namespace:
            raise OSError(f"this process is connected to Ray in namespace {current!r}, not {self.namespace!r}")
        self._ray = ray
        self._replica = ray.remote(Replica)
        return ray

    def offer(self, types: Sequence[SlotResource]) -> None:
        """The GPU types this executor's slots are of, and how each is asked of Ray."""
        self.types = {t.gpu_type: t for t in types}

    def close(self) -> None:
        """Nothing is held but attempts (their actors are the cluster's)."""

    def capacity(self) -> dict[str, int] | None:
        """Slots of each offered type on the live nodes now (nodes die and come back)."""
        if not self.types:
            return None
        return {t: sum(n) for t, n in capacity(self.nodes(), list(self.types.values())).items()}

    def slots_per_node(self) -> dict[str, list[int]] | None:
        """Slots of each offered type on each live node now (``ray_nodes.capacity``): a type's slots are
        spread over its nodes, which a policy that sizes jobs counts (a job over two nodes synchronises
        between them); None when Ray cannot be asked now."""
        if not self.types:
            return None
        try:
            return capacity(self.nodes(), list(self.types.values()))
        except (OSError, RuntimeError):
            return None

    def refusal(self, gpu_types: tuple[str, ...], gpus: int, cpus: int | None, memory_gb: float | None
                ) -> tuple[str, str] | None:
        """Why the live nodes of ``gpu_types`` could never hold the job's bundles (``ray_room.refusal``);
        None when they could, or when Ray cannot be asked now (the job then waits to be placed)."""
        if not (cpus or memory_gb):
            return None
        try:
            nodes = self.nodes()
        except (OSError, RuntimeError):
            return None
        return refusal(nodes, [self.types[t] for t in gpu_types if t in self.types], gpus, cpus, memory_gb)

    def room(self) -> dict[str, tuple[float | None, float | None]] | None:
        """Each offered type's CPU cores and GiB of memory on the live nodes, which a round's placement
        counts the jobs' asks against (``ray_room.room_by_type``); None when Ray cannot be asked now."""
        if not self.types:
            return None
        try:
            nodes = self.nodes()
        except (OSError, RuntimeError):
            return None
        return room_by_type(nodes, list(self.types.values()))

    core_enforcement = "not held on Ray (each actor keeps the CPUs of its bundle: its job's cpus, reserved)"

    def set_cores(self, job_id: int, cpus: tuple[int, ...], share: float) -> bool:
        """Not held: a Ray actor's CPUs are its placement group bundle's (the job's ``cpus``, reserved at its
        start), fixed when it is made. Dividing a node's spare cores would need the replica actor
        (ray_replica.py) to pin its attempt's processes as the local executor does (executors/local/cores.py)."""
        return False

    def nodes(self) -> list[dict]:
        """``ray.nodes()``: every node the cluster knows, live or dead."""
        return self.connect().nodes()

    # files ---------------------------------------------------------------------------------

    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(job_id)

    def log_path(self, job_id: int, attempt: int, rank: int = 0) -> Path:
        suffix = "" if rank == 0 else f".rank-{rank}"
        return self.job_dir(job_id) / f"attempt-{attempt}{suffix}.log"

    def exit_path(self, job_id: int, attempt: int, rank: int = 0) -> Path:
        suffix = "" if rank == 0 else f".rank-{rank}"
        return self.job_dir(job_id) / f"attempt-{attempt}{suffix}.exit"

    def exit_record(self, job_id: int, attempt: int) -> int | None:
        """The attempt's exit code from its replicas' records (None without rank 0's): the worst of them."""
        first = _read_code(self.exit_path(job_id, attempt))
        if first is None:
            return None
        codes = {0: first}
        for path in self.job_dir(job_id).glob(f"attempt-{attempt}.rank-*.exit"):
            rank = path.name.removeprefix(f"attempt-{attempt}.rank-").removesuffix(".exit")
            if rank.isdigit():
                codes[int(rank)] = _read_code(path)
        return _combined({r: c for r, c in codes.items() if c is not None})

    def tail(self, job_id: int, attempt: int, lines: int = 20) -> str:
        return tail(self.log_path(job_id, attempt), lines)

    # attempts --------------------------------------------------------------------------------

    def start(self, job_id: int, attempt: int, command: str | list[str], env: dict[str, str],
              workdir: str | None, slots: tuple[str, ...], *, run_as=None, replicas: int | None = None,
              cold: bool = False, cpus: int | None = None, memory_gb: float | None = None) -> Attempt:
        """Ask Ray for the attempt's placement group and replicas (always one a slot), each bundle with an even
        share of ``cpus`` and ``memory_gb``; OSError if Ray cannot be asked."""
        if replicas is not None and replicas != len(slots):
            raise OSError(f"on Ray an attempt runs one replica a slot: {len(slots)}, not {replicas}")
        if run_as is not None:
            raise OSError("on Ray, jobs run as the OS user of the Ray workers: --run-as mapped needs the local executor")
        ray = self.connect()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        types = {slot_type(s) for s in slots}
        if len(types) != 1 or next(iter(types)) not in self.types:
            raise OSError(f"slots {','.join(slots) or '(none)'} are not of one type this Ray cluster offers"
                          f" ({', '.join(self.types) or 'none'})")
        kind = self.types[types.pop()]
        world = len(slots)
        bundle = job_bundle(kind, world, cpus, memory_gb)
        strategy = "STRICT_PACK" if world <= most_on_one_node(self.nodes(), bundle) else "PACK"
        name = self._name(job_id, attempt)
        self.job_dir(job_id).mkdir(parents=True, exist_ok=True, mode=0o700)
        overlay = {k: v for k, v in env.items() if os.environ.get(k) != v}  # what the server set, not its own
        try:
            group = placement_group([dict(bundle) for _ in range(world)], strategy=strategy, name=name,
                                    lifetime="detached")
            actors = []
            for rank in range(world):
                spec = {
                    "job_id": job_id, "attempt": attempt, "rank": rank, "world_size": world, "slots": list(slots),
                    "command": command, "env": overlay, "workdir": workdir, "state_dir": str(self.state_dir),
                    "job_dir": str(self.job_dir(job_id)), "log_path": str(self.log_path(job_id, attempt, rank)),
                    "exit_path": str(self.exit_path(job_id, attempt, rank)), "gpus": bundle.get("GPU", 0) > 0,
                    "placement_group": group,
                }
                actors.append(self._replica.options(
                    name=f"{name}.{rank}", namespace=self.namespace, lifetime="detached", max_restarts=0,
                    max_concurrency=8, num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0),
                    memory=bundle.get("memory"),
                    resources={k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
                ).remote(spec))
            wheres = [a.where.remote() for a in actors]
            master = actors[0].rendezvous.remote()
            for a in actors:
                a.launch.remote(master, *wheres)
            waits = {a.wait.remote(): rank for rank, a in enumerate(actors)}
        except (ValueError, ray.exceptions.RayError) as err:  # a name still taken, Ray gone
            raise OSError(f"Ray refused the attempt: {err}") from None
        handle = Attempt(job_id, attempt, None, None, tuple(slots))
        self._tracked[job_id] = _Attempt(handle, actors, group, waits, started=time.monotonic(),
                                         waiting=_waiting(kind, world, cpus, memory_gb), wheres=wheres)
        return handle

    def _name(self, job_id: int, attempt: int) -> str:
        return f"{PREFIX}{job_id}.{attempt}"

    def is_alive(self, job_id: int) -> bool:
        return job_id in self._tracked

    def terminate(self, job_id: int) -> bool:
        """SIGTERM to every replica's process group (an attempt not placed yet is withdrawn)."""
        return self._signal(job_id, signal.SIGTERM)

    def kill(self, job_id: int) -> bool:
        """SIGKILL to every replica's process group."""
        return self._signal(job_id, signal.SIGKILL)

    def _signal(self, job_id: int, signum: int) -> bool:
        tracked = self._tracked.get(job_id)
        if tracked is None:
            return False
        ray = self.connect()
        tracked.placed = tracked.placed or _placed(ray, tracked.group)
        if not tracked.placed:  # never placed: nothing runs, nothing to save
            self._end(job_id, None, unplaced=tracked.waiting)
            return True
        tracked.signalled = signum
        for rank, actor in enumerate(tracked.actors):
            if rank not in tracked.codes:
                actor.signal.remote(int(signum))
        if signum == signal.SIGKILL:  # and the actors with them: a replica that cannot be reached is gone too
            for actor in tracked.actors:
                ray.kill(actor, no_restart=True)
        return True

    def poll(self) -> list[Exit]:
        """Attempts that ended since the last call: all replicas done, one crashed, one lost with its node, or
        its placement group not placed ``place_wait_s`` after its start (withdrawn)."""
        if self._tracked:
            ray = self.connect()
            refs = [ref for t in self._tracked.values() for ref in t.waits if t.waits[ref] not in t.codes]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
            owner = {ref: job for job, t in self._tracked.items() for ref in t.waits}
            for ref in ready:
                tracked = self._tracked.get(owner[ref])
                if tracked is None:
                    continue
                rank = tracked.waits[ref]
                try:
                    tracked.codes[rank] = ray.get(ref)["code"]
                except ray.exceptions.RayError as err:
                    tracked.codes[rank] = None
                    if tracked.signalled != signal.SIGKILL and not tracked.lost:
                        tracked.lost = _lost(err)
            for job_id, tracked in list(self._tracked.items()):
                codes = tracked.codes
                done = len(codes) == len(tracked.actors)
                crashed = any(c not in (0, PREEMPTED) for c in codes.values())
                if crashed and not tracked.lost and tracked.signalled != signal.SIGKILL:
                    verdict = self._node_verdict(ray, tracked)  # None: not yet
                    if verdict is None:
                        continue
                    tracked.lost = verdict
                if tracked.lost or done or crashed:
                    self._end(job_id, None if tracked.lost else _combined(codes), tracked.lost)
            self._withdraw_unplaced(ray)
        ended, self._ended = self._ended, []
        return ended

    def _node_verdict(self, ray, tracked: _Attempt) -> str | None:
        """A rank of ``tracked`` crashed: "" when every rank's node is there (a crash), why one is lost
        (the attempt is lost, not crashed), or None while some rank has not answered and ``verdict_s``
        has not passed since the crash was seen."""
        if tracked.verdict is None:
            tracked.verdict = _NodeVerdict({a.where.remote(): rank for rank, a in enumerate(tracked.actors)},
                                           time.monotonic() + self.verdict_s)
        verdict = tracked.verdict
        waiting = [ref for ref, rank in verdict.pings.items() if rank not in verdict.answers]
        ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0) if waiting else ([], [])
        for ref in ready:
            try:
                verdict.answers[verdict.pings[ref]] = ray.get(ref)
            except ray.exceptions.RayError as err:
                return _lost(err)
        if len(verdict.answers) < len(tracked.actors):
            if time.monotonic() < verdict.deadline:
                return None
            silent = sorted(set(range(len(tracked.actors))) - set(verdict.answers))
            return f"its Ray node stopped answering (rank {', '.join(map(str, silent))}, {self.verdict_s:g} s)"
        alive = {n["NodeID"] for n in self.nodes() if n.get("Alive")}
        dead = sorted({a["node_id"] for a in verdict.answers.values()
                       if a["node_id"] not in alive or a.get("raylet") is False})  # its replica saw its raylet go
        return f"its Ray node {dead[0][:8]} died" if dead else ""

    def nodes_of(self, job_id: int) -> tuple[str, ...] | None:
        """The node of each rank of the job's attempt (rank r holds its r-th slot), ``IP/NODE-ID``
        shortened; None while not known (not placed yet, adopted, or not this executor's)."""
        tracked = self._tracked.get(job_id)
        if tracked is None or not tracked.wheres:
            return None
        if not tracked.nodes:
            ray = self.connect()
            ready, _ = ray.wait(tracked.wheres, num_returns=len(tracked.wheres), timeout=0)
            if len(ready) < len(tracked.wheres):
                return None
            try:
                tracked.nodes = tuple(node_label(ray.get(ref)) for ref in tracked.wheres)
            except ray.exceptions.RayError:
                tracked.wheres = []
                return None
        return tracked.nodes

    def _withdraw_unplaced(self, ray) -> None:
        """End the attempts whose groups Ray has not placed ``place_wait_s`` after their start: each is
        asked once, at that deadline (a replica that ended was placed)."""
        now = time.monotonic()
        for job_id, tracked in list(self._tracked.items()):
            if tracked.placed or now - tracked.started < self.place_wait_s:
                continue
            tracked.placed = bool(tracked.codes) or _placed(ray, tracked.group)
            if not tracked.placed:
                self._end(job_id, None, unplaced=f"{tracked.waiting} ({self.place_wait_s:g} s so far)")

    def _end(self, job_id: int, code: int | None, lost: str = "", unplaced: str = "") -> None:
        """Report the attempt's end; kill what is left of it and give its resources back."""
        tracked = self._tracked.pop(job_id)
        ray = self.connect()
        for actor in tracked.actors:
            try:
                ray.kill(actor, no_restart=True)
            except ray.exceptions.RayError:
                pass
        _remove_group(ray, tracked.group)
        self._ended.append(Exit(job_id, tracked.attempt.attempt, code, lost, unplaced))

    # a restarted server -----------------------------------------------------------------------

    def scan(self) -> list[Attempt]:
        """The attempts of this namespace that Ray still runs (their actors), whoever started them."""
        ray = self.connect()
        ranks: dict[tuple[int, int], dict[int, str]] = {}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            parsed = _parse_name(entry["name"]) if entry["namespace"] == self.namespace else None
            if parsed is not None:
                job_id, attempt, rank = parsed
                ranks.setdefault((job_id, attempt), {})[rank] = entry["name"]
        handles: dict[tuple[int, int], dict[int, object]] = {}
        for key, names in ranks.items():
            for rank, name in names.items():
                try:
                    handles.setdefault(key, {})[rank] = ray.get_actor(name, namespace=self.namespace)
                except ValueError:  # gone since the listing
                    continue
        asked = {key: actors[0].info.remote() for key, actors in handles.items() if 0 in actors}
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=RAY_CALL_S) if asked else ([], [])
        self._found = {}
        found = []
        for (job_id, attempt), names in sorted(ranks.items()):
            actors = handles.get((job_id, attempt), {})
            info = None
            ref = asked.get((job_id, attempt))
            if ref is not None and ref in ready:
                try:
                    info = ray.get(ref)
                except ray.exceptions.RayError:
                    info = None
            self._found[(job_id, attempt)] = ([actors.get(r) for r in range(max(names) + 1)], info)
            found.append(Attempt(job_id, attempt, None, None, tuple(info["slots"]) if info else ()))
        return found

    def adopt(self, attempt: Attempt) -> bool:
        """Wait on the replicas of an attempt found by ``scan``; False unless all of them are there."""
        actors, info = self._found.get((attempt.job_id, attempt.attempt), ([], None))
        if info is None or len(actors) != info["world_size"] or any(a is None for a in actors):
            return False
        self.connect()
        from ray.util import get_placement_group

        try:
            group = get_placement_group(self._name(attempt.job_id, attempt.attempt))
        except ValueError:
            group = None
        waits = {a.wait.remote(): rank for rank, a in enumerate(actors)}
        self._tracked[attempt.job_id] = _Attempt(attempt, actors, group or _NoGroup(), waits, placed=True)
        return True

    def kill_attempt(self, attempt: Attempt) -> None:
        """Kill an attempt this server does not track: its actors (their processes die with them) and group."""
        ray = self.connect()
        prefix = f"{self._name(attempt.job_id, attempt.attempt)}."
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == self.namespace and entry["name"].startswith(prefix):
                try:
                    ray.kill(ray.get_actor(entry["name"], namespace=self.namespace), no_restart=True)
                except (ValueError, ray.exceptions.RayError):
                    pass
        from ray.util import get_placement_group

        try:
            _remove_group(ray, get_placement_group(self._name(attempt.job_id, attempt.attempt)))
        except ValueError:
            pass


class _NoGroup:
    """The placement group of an adopted attempt that has none left: nothing to remove."""


def _placed(ray, group) -> bool:
    """Has Ray placed every bundle of ``group`` (its replicas may be running)?"""
    if isinstance(group, _NoGroup):
        return True
    try:
        return ray.util.placement_group_table(group).get("state") == "CREATED"
    except ray.exceptions.RayError:
        return False


def _waiting(kind: SlotResource, world: int, cpus: int | None, memory_gb: float | None) -> str:
    """What an attempt not placed yet waits for, in words."""
    asked = ([f"{cpus:g} CPU cores"] if cpus else []) + ([f"{memory_gb:g} GiB"] if memory_gb else [])
    if asked:
        return f"waiting for Ray to place {' and '.join(asked)} beside its slots"
    return f"waiting for Ray to place its {world} {kind.gpu_type} slot{'s' if world != 1 else ''}"


def _remove_group(ray, group) -> None:
    if isinstance(group, _NoGroup):
        return
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(group)
    except (ValueError, ray.exceptions.RayError):
        pass


def _parse_name(name: str) -> tuple[int, int, int] | None:
    """``apportion.12.3.0`` → ``(12, 3, 0)``; None for any other name."""
    if not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX):].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    job_id, attempt, rank = (int(p) for p in parts)
    return job_id, attempt, rank


def _read_code(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _combined(codes: dict[int, int | None]) -> int | None:
    """An attempt's exit code from its replicas': the first crash's, else 75 if any was preempted, else 0."""
    for rank in sorted(codes):
        if codes[rank] not in (0, PREEMPTED):
            return codes[rank]
    return PREEMPTED if PREEMPTED in codes.values() else 0


def node_label(where: dict) -> str:
    """A Ray node as `status` and `queue` name it: ``10.0.0.5/3f2a9c1b`` (its IP, its id's first 8 digits:
    nodes on one machine share an IP)."""
    return f"{where['ip']}/{where['node_id'][:8]}"


def _lost(err: Exception) -> str:
    """Why a replica's actor is gone, in a few words."""
    text = str(err)
    if "node" in text.lower() and ("died" in text.lower() or "dead" in text.lower()):
        return "its Ray node died"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    return f"its Ray actor died ({first[:200]})"
