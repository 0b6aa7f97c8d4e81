"""`apportion serve --executor ray` on a Ray cluster of four nodes on this machine.

The nodes stand for machines with GPUs of two types, declared in the cluster file the two
ways it allows: one node with two "k80" slots (a custom resource), two nodes with one GPU each
that Ray counts as a V100 (a GPU Ray only counts, labelled ``accelerator_type:V100`` as Ray
labels real ones), and a head node with none, and one CPU for a sweep's replays. A 2-slot job therefore runs on one node as k80s and across two nodes as
v100s. The jobs are real processes started by Ray actors; they talk to the server as they do
on the local executor. The cluster starts once for the module (about 20 s on two cores).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray", reason="the Ray executor's tests need ray (pip install -e '.[ray]')")
pytest.importorskip("torch", reason="the data-parallel job needs torch")

from serve_helpers import REPO, Server, wait_for  # noqa: E402

pytestmark = pytest.mark.ray

HERE = Path(__file__).resolve().parent
RUNTIME_JOB = HERE / "runtime_job.py"
DDP_JOB = HERE / "ddp_job.py"
NODE = re.compile(r"on Ray node ([0-9a-f]+)")
# detect a dead node within about a second, not Ray's default 15 s
FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300,
                          "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION})  # a CPU for sweeps
    nodes = {
        "k80": cluster.add_node(num_cpus=0, resources={"k80": 2}),
        "v100-a": cluster.add_node(num_cpus=0, num_gpus=1, resources={"accelerator_type:V100": 1}),
        "v100-b": cluster.add_node(num_cpus=0, num_gpus=1, resources={"accelerator_type:V100": 1}),
    }
    cluster.wait_for_nodes()
    directory = tmp_path_factory.mktemp("ray")
    cluster_file = directory / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump({"ray": {
        "shared_dir": str(directory / "shared"),
        "gpu_types": {"k80": {"resource": "k80"}, "v100": {"accelerator_type": "V100"}},
    }}))
    yield cluster, nodes, cluster_file, directory
    cluster.shutdown()


@pytest.fixture(scope="module")
def server(cluster):
    ray_cluster, _, cluster_file, directory = cluster
    server = Server(directory / "state", "--executor", "ray", "--ray-address", ray_cluster.address,
                    "--cluster", str(cluster_file), "--round-s", "30", "--policy", "fifo")
    server.start(timeout=60)
    yield server
    server.stop()


def submit(server: Server, name: str, script: Path, steps: int, gpus: int, gpu_type: str, **env) -> str:
    import httpx

    spec = {"name": name, "command": [sys.executable, str(script), str(steps)], "total_steps": steps,
            "gpus": gpus, "gpu_types": [gpu_type], "workdir": str(REPO), "checkpoint_every": "0.5",
            "env": {k: str(v) for k, v in env.items()}, "user": "tester"}
    answer = httpx.post(f"{server.url}/jobs", json=spec, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def job(server: Server, job_id: str) -> dict:
    return next(j for j in server.jobs() if j["id"] == job_id)


def finished(server: Server, *ids: str):
    jobs = [job(server, i) for i in ids]
    return jobs if all(j["status"] in ("completed", "failed", "cancelled") for j in jobs) else None


def shared(cluster) -> Path:
    return cluster[3] / "shared"


def log(cluster, job_id: str, attempt: int, rank: int = 0) -> str:
    suffix = "" if rank == 0 else f".rank-{rank}"
    path = shared(cluster) / "jobs" / job_id / f"attempt-{attempt}{suffix}.log"
    return path.read_text() if path.exists() else ""


def node_of(cluster, job_id: str, attempt: int, rank: int = 0) -> str | None:
    found = NODE.search(log(cluster, job_id, attempt, rank))
    return found.group(1) if found else None


def checksum_after(steps: int) -> int:
    """runtime_job.py's final checksum after ``steps`` steps, however often it was stopped."""
    value = 1
    for step in range(steps):
        value = (value * 31 + step + 1) % 1_000_003
    return value


def test_a_two_replica_ddp_job_across_two_nodes_ends_with_the_weights_of_one_node(cluster, server):
    on_one = submit(server, "ddp-k80", DDP_JOB, 30, 2, "k80", STEP_S=0.02)
    on_two = submit(server, "ddp-v100", DDP_JOB, 30, 2, "v100", STEP_S=0.02)
    jobs = wait_for(lambda: finished(server, on_one, on_two), 120, "both DDP jobs to finish", server)
    assert [j["status"] for j in jobs] == ["completed", "completed"], jobs

    assert node_of(cluster, on_one, 1, 0) == node_of(cluster, on_one, 1, 1) is not None  # STRICT_PACK: one node
    assert None is not node_of(cluster, on_two, 1, 0) != node_of(cluster, on_two, 1, 1) is not None  # PACK: two
    weights = [re.findall(r"final_weights=.*", log(cluster, i, 1)) for i in (on_one, on_two)]
    assert weights[0] == weights[1] and len(weights[0]) == 1, weights
    assert "world=2" in weights[0][0]
    assert "rank 1 of 2: follows rank 0" in log(cluster, on_two, 1, 1)  # one rank talks to the server
    assert "CUDA_VISIBLE_DEVICES=0" in log(cluster, on_two, 1, 1)  # the GPU Ray gave that rank, on its node
    assert "CUDA_VISIBLE_DEVICES" not in log(cluster, on_one, 1, 0)  # k80s here are a resource, not Ray GPUs


def test_a_cancelled_job_gets_sigterm_on_its_node_and_leaves_a_checkpoint(cluster, server):
    import httpx

    job_id = submit(server, "cancelled", RUNTIME_JOB, 100_000, 1, "k80", STEP_S=0.02)
    wait_for(lambda: "step 10\n" in log(cluster, job_id, 1), 60, "the job to take 10 steps", server)
    httpx.post(f"{server.url}/jobs/{job_id}/cancel", json={"user": "tester"}, timeout=10)
    settled = lambda: (j := job(server, job_id))["status"] == "cancelled" and "stopping" not in j["reason"] and j  # noqa: E731
    done = wait_for(settled, 60, "the cancelled attempt to exit", server)

    assert done["exit_code"] == 75, done  # it checkpointed: SIGTERM reached it through its replica
    stop = re.search(r"preempted at step (\d+)/\d+ \(signal SIGTERM\)", log(cluster, job_id, 1))
    assert stop, log(cluster, job_id, 1)
    checkpoints = shared(cluster) / "jobs" / job_id / "checkpoints"
    assert f"step-{int(stop.group(1)):08d}.pt" in [p.name for p in checkpoints.glob("step-*.pt")]


def test_a_server_killed_with_sigkill_readopts_the_attempt_still_running_on_ray(cluster, server):
    job_id = submit(server, "adopted", RUNTIME_JOB, 150, 1, "k80", STEP_S=0.05)
    wait_for(lambda: "step 20\n" in log(cluster, job_id, 1), 60, "the job to take 20 steps", server)
    server.kill()
    server.start(timeout=60)
    done = wait_for(lambda: finished(server, job_id), 60, "the adopted job to finish", server)[0]

    assert done["status"] == "completed" and done["attempts"] == 1 and done["retries"] == 0, done
    assert f"adopted jobs [{job_id}]" in server.log()
    assert re.findall(r"final_checksum=\d+", log(cluster, job_id, 1)) == [f"final_checksum={checksum_after(150)}"]


def test_a_job_whose_node_dies_resumes_on_another_node_from_its_checkpoint(cluster, server):
    ray_cluster, nodes, _, _ = cluster
    job_id = submit(server, "survivor", RUNTIME_JOB, 200, 1, "v100", STEP_S=0.05)
    checkpoints = shared(cluster) / "jobs" / job_id / "checkpoints"

    def checkpointed():
        steps = [int(p.stem.split("-")[1]) for p in checkpoints.glob("step-*.pt")] if checkpoints.exists() else []
        return max(steps, default=0) >= 40

    wait_for(checkpointed, 60, "a checkpoint at step 40 or later", server)
    first = node_of(cluster, job_id, 1)
    dying = next(n for name, n in nodes.items() if name.startswith("v100") and n.node_id == first)
    ray_cluster.remove_node(dying, allow_graceful=False)
    done = wait_for(lambda: finished(server, job_id), 60, "the job to finish on the other node", server)[0]

    assert done["status"] == "completed" and done["attempts"] == 2 and done["retries"] == 1, done
    assert node_of(cluster, job_id, 2) not in (None, first)
    assert f"job {job_id} crashed (lost: its Ray node died)" in server.log()
    resumed = re.search(r"resumed from step-(\d+)\.pt", log(cluster, job_id, 2))
    assert resumed and int(resumed.group(1)) >= 40, log(cluster, job_id, 2)
    assert "final_checksum" not in log(cluster, job_id, 1)  # attempt 1 died with its node
    assert re.findall(r"final_checksum=\d+", log(cluster, job_id, 2)) == [f"final_checksum={checksum_after(200)}"]


def test_a_sweep_on_ray_gives_the_replays_of_a_local_one(cluster):
    from apportion.experiment import WorkloadSettings
    from apportion.sweep import grid, run_grid

    cells = grid(["fifo", "las"], rates=[4.0], seeds=[0, 1], clusters=["v100:4,k80:4"])
    settings = WorkloadSettings(jobs=20)
    on_ray = run_grid(cells, settings, ray_address=cluster[0].address)
    here = run_grid(cells, settings, workers=1)

    strip = lambda rows: [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in rows]  # noqa: E731
    assert strip(on_ray) == strip(here)
    assert not ray.is_initialized()  # the sweep left the cluster it joined


def test_a_node_lost_under_some_ranks_of_a_gang_is_a_lost_node_not_a_crash(cluster, server):
    """The rank on the live node exits 1 on the broken collective (gloo) before Ray reports the dead
    node; the executor waits for its verdict on every rank's node: the attempt is lost, no retry counted."""
    ray_cluster, _, _, _ = cluster
    for _ in range(2):  # two v100 nodes, whatever the tests before left
        ray_cluster.add_node(num_cpus=0, num_gpus=1, resources={"accelerator_type:V100": 1})
    job_id = submit(server, "gang", DDP_JOB, 150, 2, "v100", STEP_S=0.03)
    checkpoints = shared(cluster) / "jobs" / job_id / "checkpoints"
    wait_for(lambda: checkpoints.exists() and any(checkpoints.glob("step-*.pt")), 90, "a checkpoint", server)
    second = node_of(cluster, job_id, 1, 1)
    assert second is not None and second != node_of(cluster, job_id, 1, 0)  # PACK: one rank a node
    ray_cluster.remove_node(next(n for n in ray_cluster.worker_nodes if n.node_id == second), allow_graceful=False)
    done = wait_for(lambda: finished(server, job_id), 120, "the gang to finish after its node died", server)[0]

    assert done["status"] == "completed" and done["attempts"] >= 2, done
    assert re.search(rf"job {job_id} crashed \(lost: its Ray node", server.log()), server.log()[-3000:]
    assert not re.search(rf"job {job_id} crashed \(exit", server.log())  # never counted as the job's crash
    assert re.search(rf"retry 1 from step \d+", server.log())  # no "of 3": not counted towards --max-retries
