"""End to end on CPU: the real server, the PyTorch examples, preemption, and a server killed
with SIGKILL, in one scenario. Every job must finish exactly its steps with the weights of an
uninterrupted run.

The jobs are examples/cnn.yaml (twice, seeds 0 and 1) and examples/lm.yaml, with fewer steps
and larger batches than the files give (so that a step takes tens of milliseconds and jobs
outlive a few 2-second rounds). ``las`` with thresholds every 2 GPU-seconds makes the three
jobs take turns on the two CPU slots, so jobs are preempted and resumed.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch", reason="the end-to-end serve tests run the PyTorch examples")

from apportion.executors.local import LocalExecutor  # noqa: E402
from apportion.serve.store.state import StateStore  # noqa: E402
from serve_helpers import REPO, Server, all_done, job_env, wait_for  # noqa: E402

EXAMPLES = REPO / "examples"
# name, example job file, arguments after the script, total steps
JOBS = [
    ("cnn-seed0", "cnn.yaml", ["--seed", "0", "--batch-size", "128", "--size", "32"], 150),
    ("cnn-seed1", "cnn.yaml", ["--seed", "1", "--batch-size", "128", "--size", "32"], 150),
    ("lm", "lm.yaml", ["--seed", "0", "--batch-size", "64"], 150),
]


def serve_args(up_to: int) -> tuple[str, ...]:
    """las in 2 GPU-second steps up to ``up_to``: the jobs take turns (each is preempted within a
    round or two of catching up with the others), then run to their ends in submission order."""
    thresholds = ",".join(str(t) for t in range(2, up_to + 1, 2))
    return ("--slots", "cpu:2", "--round-s", "2", "--policy", "las", "--las-thresholds", thresholds, "--grace-s", "20")

FINAL = re.compile(r"^final_checksum=.*$", re.MULTILINE)


def example_command(example: str) -> list[str]:
    """The interpreter and script of an example job file's command."""
    command = yaml.safe_load((EXAMPLES / example).read_text())["command"]
    return (shlex.split(command) if isinstance(command, str) else [str(c) for c in command])[:2]


def write_job(directory: Path, name: str, example: str, args: list[str], steps: int) -> Path:
    spec = yaml.safe_load((EXAMPLES / example).read_text())
    spec.update(name=name, command=[*example_command(example), *args], total_steps=steps, workdir=str(REPO))
    spec.pop("user", None)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[str, str]:
    """The final line of an uninterrupted standalone run of each job, run side by side: once a test
    session, kept in a file every worker of the session reads (this module and the Slurm one use them)."""
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent  # the session's, above each xdist worker's own
    with open(shared / "e2e-references.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits for the first's runs, then reads them
        kept = shared / "e2e-references.json"
        if kept.exists():
            return json.loads(kept.read_text())
        lines = run_references()
        kept.write_text(json.dumps(lines))
        return lines


def run_references() -> dict[str, str]:
    for example in {e for _, e, _, _ in JOBS}:
        if not (EXAMPLES / example).exists():
            pytest.fail(f"{EXAMPLES / example} is missing")
    running = {}
    for name, example, args, steps in JOBS:
        command = [sys.executable if c == "python" else c for c in example_command(example)]
        running[name] = subprocess.Popen([*command, *args, "--steps", str(steps)], cwd=REPO, env=job_env(),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = {}
    for name, process in running.items():
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out
        lines[name] = FINAL.findall(out)[-1]
    return lines


def check_adopted(state: Path, alive: dict[int, int]) -> None:
    """Each attempt still running when its server was killed was adopted by the next, not started again."""
    store = StateStore(state / "state.db")
    try:
        for job_id, attempt in alive.items():
            events = [(e.event, e.detail.split()[1]) for e in store.events(job_id)]
            assert ("adopt", str(attempt)) in events or ("exit", f"{attempt}:") in events, events
    finally:
        store.close()


def submit_all(server: Server, directory: Path) -> dict[str, str]:
    from typer.testing import CliRunner

    from apportion.cli import app

    ids = {}
    for name, example, args, steps in JOBS:
        result = CliRunner().invoke(app, ["submit", str(write_job(directory, name, example, args, steps)),
                                          "--server", server.url])
        assert result.exit_code == 0, result.output
        ids[name] = re.search(r"submitted job (\d+)", result.output).group(1)
    return ids


def final_line(server: Server, job: dict) -> str:
    log = server.state_dir / "jobs" / job["id"] / f"attempt-{job['attempts']}.log"
    found = FINAL.findall(log.read_text())
    return found[-1] if found else f"(no final_checksum in {log})"


def attempts_never_overlap(state_dir: Path) -> None:
    """Per job, the event log alternates: start (or adopt) of attempt n, its exit, start of n+1, ..."""
    store = StateStore(state_dir / "state.db")
    try:
        for job in store.jobs():
            live = None
            for event in store.events(job.id):
                if event.event == "start":
                    assert live is None, f"job {job.id}: {event.detail} while attempt {live} was alive"
                    live = int(event.detail.split()[1])
                elif event.event == "adopt":
                    live = int(event.detail.split()[1])
                elif event.event == "exit":
                    assert live == int(event.detail.split()[1].rstrip(":")), event
                    live = None
    finally:
        store.close()


def check_finished(server: Server, ids: dict[str, str], references: dict[str, str]) -> dict[str, dict]:
    jobs = {j["name"]: j for j in server.jobs()}
    for name, _, _, steps in JOBS:
        job = jobs[name]
        assert job["status"] == "completed", job
        assert job["steps_done"] == job["total_steps"] == steps, job
        assert final_line(server, job) == references[name], f"{name}: weights differ from the uninterrupted run"
        assert f"steps={steps} " in references[name]
    attempts_never_overlap(server.state_dir)
    return jobs


def test_three_jobs_take_turns_under_las_survive_a_server_sigkill_and_end_as_if_never_stopped(tmp_path, references):
    """One scenario, two behaviours (one set of torch runs): the jobs take turns under las, and the
    server is killed with SIGKILL while they train; the next server adopts what still runs, no job
    runs twice at once, and every job ends with the weights of an uninterrupted run."""
    state = tmp_path / "state"
    first, second = Server(state, *serve_args(16)), None
    try:
        first.start()
        ids = submit_all(first, tmp_path)
        wait_for(lambda: any(j["status"] == "running" and j["steps_done"] >= 10 for j in first.jobs()),
                 120, "a job to be mid-run", first)
        first.kill()
        assert LocalExecutor(state).scan(), "killing the server must not kill its jobs"
        time.sleep(1.0)  # the jobs train on with no server to answer them
        alive = {a.job_id: a.attempt for a in LocalExecutor(state).scan()}

        second = Server(state, *serve_args(16), port=first.port).start()
        assert "recovered: adopted jobs" in second.log()
        twice = []

        def done():
            running = [a.job_id for a in LocalExecutor(state).scan()]
            if len(running) != len(set(running)):
                twice.append(running)
            return all_done(second, len(JOBS))

        wait_for(done, 240, "all jobs to finish after the restart", second, every=0.1)
        assert not twice, f"a job ran twice at once: {twice}"
        jobs = check_finished(second, ids, references)
        check_adopted(state, alive)
    finally:
        for server in (second, first):
            if server is not None:
                server.stop()
        first.kill_jobs()
    # The two jobs submitted first start together and climb LAS's queues side by side, so they
    # overtake each other and are preempted in turn. The last one starts with the least attained
    # service; whether it ever overtakes one of them depends on timing, so it is not required.
    for name in ("cnn-seed0", "cnn-seed1"):
        assert jobs[name]["preemptions"] >= 1, f"{name} was never preempted: {jobs[name]}"
    for name, job in jobs.items():
        assert job["attempts"] == job["preemptions"] + 1 + job["retries"]
        assert job["retries"] == 0
        if job["preemptions"] == 0:
            continue
        last = (state / "jobs" / job["id"] / f"attempt-{job['attempts']}.log").read_text()
        assert "resumed from step-" in last  # the last attempt started from a checkpoint
        first_log = (state / "jobs" / job["id"] / "attempt-1.log").read_text()
        assert "(lease not renewed)" in first_log and "exit 75" in first_log  # stopped through its lease
