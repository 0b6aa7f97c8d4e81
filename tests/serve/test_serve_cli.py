"""`apportion serve / submit / queue / cancel / logs / status` as a user runs them, against a
real server process whose jobs are a torch-free stand-in (contract_job.py)."""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from apportion.cli import app
from serve_helpers import AS_ROOT, CONTRACT_JOB, Server, free_port, wait_for

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-cli")
    with Server(base / "state", "--slots", "cpu:2", "--round-s", "2", "--max-retries", "1", "--grace-s", "3") as running:
        yield running


def job_file(directory: Path, name: str, steps: int = 20, **env) -> Path:
    path = directory / f"{name}.yaml"
    env_lines = "".join(f"  {k}: \"{v}\"\n" for k, v in env.items())
    path.write_text(f"name: {name}\ncommand: [{sys.executable}, {CONTRACT_JOB}]\ntotal_steps: {steps}\n"
                    f"user: ann\n" + (f"env:\n{env_lines}" if env else ""))
    return path


def submit(server, path: Path, *extra: str) -> str:
    result = cli("submit", str(path), "--server", server.url, *extra)
    assert result.exit_code == 0, result.output
    return re.search(r"submitted job (\d+)", result.output).group(1)


def job(server, job_id: str) -> dict:
    return next(j for j in server.jobs() if j["id"] == job_id)


def finished(server, job_id: str):
    row = job(server, job_id)
    return row if row["status"] in ("completed", "failed", "cancelled") else None


def test_submit_queue_logs_and_status(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "quick", steps=30, STEP_S="0.02"))
    wait_for(lambda: finished(server, job_id), 30, "the job to finish", server)

    table = cli("queue", "--server", server.url)
    assert table.exit_code == 0, table.output
    header = table.output.splitlines()[0].split()  # the first line: no blank table edge above it
    assert header == ["ID", "NAME", "USER", "QUEUE", "PRIO", "STATUS(REASON)", "GPUS", "ALLOC", "SUBMITTED",
                      "RUNTIME", "PROGRESS", "STALL", "EST.FINISH"]
    assert re.search(rf"\b{job_id}\s+quick\s+ann\s+-\s+1\s+completed\s+1\s+-\s+\S+\s+\S+\s+30/30 \(100%\)",
                     table.output), table.output

    listed = json.loads(cli("queue", "--json", "--server", server.url).output)
    row = next(j for j in listed if j["id"] == job_id)
    assert (row["status"], row["steps_done"], row["total_steps"], row["preemptions"]) == ("completed", 30, 30, 0)

    logs = cli("logs", job_id, "--server", server.url)
    assert logs.exit_code == 0 and "final_checksum=" in logs.output

    status = cli("status", "--server", server.url)
    assert status.exit_code == 0 and "policy las" in status.output and "cpu:0(cpu)" in status.output
    assert json.loads(cli("status", "--json", "--server", server.url).output)["round_s"] == 2.0


def test_queue_shows_when_a_running_job_should_finish(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "eta", steps=2000, STEP_S="0.02"))
    wait_for(lambda: (lambda r: r if r["status"] == "running" and r["estimated_finish"] else None)(job(server, job_id)),
             30, "the job's speed to be measured", server)

    listed = json.loads(cli("queue", "--json", "--server", server.url).output)
    row = next(j for j in listed if j["id"] == job_id)
    table = cli("queue", "--server", server.url).output
    line = next(line for line in table.splitlines() if re.match(rf"\s*{job_id}\s+eta\b", line))
    cli("cancel", job_id, "--user", "ann", "--server", server.url)

    # at most the steps its job file has left, at the speed it reports, from when it was asked
    assert 0 < row["predicted_remaining_s"] and row["estimated_finish"] > row["submitted"]
    assert row["estimate_from"].startswith(("history: ", "job file: "))
    assert re.search(r"\s\d\d:\d\d:\d\d$", line.rstrip()), line  # running: a clock time, no ≥


def test_logs_follow_runs_until_the_job_ends(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "followed", steps=40, STEP_S="0.03"))
    result = cli("logs", job_id, "--follow", "--server", server.url)
    assert result.exit_code == 0, result.output
    assert "resuming at step 0" in result.output and "final_checksum=" in result.output
    assert job(server, job_id)["status"] == "completed"


def test_a_crash_is_retried_from_its_checkpoint(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "crash-once", steps=30, STEP_S="0.02", CRASH_AT="12",
                                     CRASH_ON_ATTEMPT="1"))
    row = wait_for(lambda: finished(server, job_id), 30, "the job to finish", server)
    assert (row["status"], row["retries"], row["attempts"], row["steps_done"]) == ("completed", 1, 2, 30)


def test_a_job_that_keeps_crashing_fails_with_its_last_lines(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "doomed", steps=30, STEP_S="0.01", CRASH_AT="3",
                                     CRASH_ON_ATTEMPT="*"))
    row = wait_for(lambda: finished(server, job_id), 30, "the job to fail", server)
    assert row["status"] == "failed" and row["attempts"] == 2  # --max-retries 1
    assert "boom at step 3" in row["reason"] and "exit 3" in row["reason"]
    assert row["last_lines"].splitlines()[-1] == "boom at step 3"
    table = cli("queue", "--server", server.url).output
    row_line = next(line for line in table.splitlines() if line.lstrip().startswith(f"{job_id} "))
    assert "failed(exit 3 on attempt 2, after 1 retry: boom at step 3)" in row_line  # its reason, in its row
    assert table.count("boom at step 3") == 1 and "Traceback" not in table  # the log is one command away
    assert f"failed: {job_id}; the log of one: apportion logs {job_id}" in table
    assert cli("logs", job_id, "--server", server.url).output.rstrip().endswith("boom at step 3")


def test_cancel_is_for_the_owner_only(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "long", steps=100000, STEP_S="0.05"))
    refused = cli("cancel", job_id, "--user", "mallory", "--server", server.url)
    assert refused.exit_code == 2
    assert f"job {job_id} belongs to 'ann', not 'mallory'" in refused.output
    done = cli("cancel", job_id, "--user", "ann", "--server", server.url)
    assert done.exit_code == 0, done.output
    row = wait_for(lambda: (lambda r: r if r["alloc"] == "" else None)(job(server, job_id)), 30,
                   "the cancelled job to let go of its slot", server)
    assert row["status"] == "cancelled"


def test_a_malformed_job_file_is_rejected_at_submit_and_nothing_is_stored(server, tmp_path):
    before = len(server.jobs())
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncommand: python x.py\ntotal_steps: 10\ngpus: lots\n")
    result = cli("submit", str(bad), "--server", server.url)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {bad}:4: field 'gpus': must be a whole number from 1 to 1,048,576, got 'lots' (a string)"
    too_big = job_file(tmp_path, "too-big")
    too_big.write_text(too_big.read_text() + "gpus: 3\n")
    result = cli("submit", str(too_big), "--server", server.url)
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: {too_big}:5: field 'gpus': asks for 3; the most this server has of"
                                     " an allowed type is 2 (cpu)")
    assert len(server.jobs()) == before


def test_submit_json_names_the_id_and_the_user(server, tmp_path):
    result = cli("submit", str(job_file(tmp_path, "as-json", steps=5)), "--server", server.url, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer == {"id": answer["id"], "user": "ann"} and job(server, answer["id"])["name"] == "as-json"


class Proxy:
    """A proxy in front of ``url`` that counts the requests it passes on; ``drop_first``: it hangs up
    on the first without its answer (as a server killed after storing the job would)."""

    def __init__(self, url: str, drop_first: bool) -> None:
        self.drop_first = drop_first
        self.target = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            with client, socket.create_connection(self.target) as upstream:
                upstream.sendall(_message(client))
                answer = _message(upstream)
                self.requests += 1
                if self.requests > 1 or not self.drop_first:
                    client.sendall(answer)

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes its accept()
        except OSError:
            pass
        self.listener.close()


def _message(sock: socket.socket) -> bytes:
    """One HTTP request or response (its headers and a body of Content-Length bytes) read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)) and (chunk := sock.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def test_submit_retries_once_after_a_dropped_connection_and_stores_one_job(server, tmp_path):
    before = len(server.jobs())
    proxy = Proxy(server.url, drop_first=True)
    try:
        result = cli("submit", str(job_file(tmp_path, "retried", steps=5)), "--server", proxy.url, "--json")
    finally:
        proxy.close()
    assert result.exit_code == 0, result.output
    assert proxy.requests == 2  # the first was stored and its answer lost; the retry found it
    jobs = server.jobs()
    assert len(jobs) == before + 1 and [j["name"] for j in jobs].count("retried") == 1
    assert json.loads(result.output)["id"] == jobs[-1]["id"]


def test_submit_does_not_retry_a_refusal(server, tmp_path):
    too_big = job_file(tmp_path, "too-big-once")
    too_big.write_text(too_big.read_text() + "gpus: 3\n")
    proxy = Proxy(server.url, drop_first=False)
    try:
        result = cli("submit", str(too_big), "--server", proxy.url)
    finally:
        proxy.close()
    assert result.exit_code == 2 and "asks for 3" in result.output
    assert proxy.requests == 1


def test_an_unreachable_server_is_one_line_naming_its_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["queue"], ["status"], ["cancel", "1"], ["logs", "1"], ["submit", str(job_file(tmp_path, "x"))]):
        result = cli(*args, "--server", url)
        assert result.exit_code == 2, args
        assert result.output.startswith(f"error: cannot reach the apportion server at {url}")
        assert len(result.output.strip().splitlines()) == 1


def test_serve_refuses_a_public_address_without_credentials(tmp_path):
    result = cli("serve", "--port", "0", "--state-dir", str(tmp_path), "--host", "0.0.0.0",
                 "--slots", "cpu:1", *AS_ROOT)
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --host 0.0.0.0 is not loopback: add users first (apportion users add NAME"
                                     " --state-dir ...) or give --token-file, so that only callers with a credential"
                                     " get in")


def test_serve_refuses_a_second_server_on_the_same_state_dir(server):
    result = cli("serve", "--state-dir", str(server.state_dir), "--port", str(free_port()), "--slots", "cpu:1",
                 *AS_ROOT)
    assert result.exit_code == 2
    assert re.fullmatch(rf"error: another apportion server \(pid \d+\) is using {re.escape(str(server.state_dir))}",
                        result.output.strip())


def test_serve_on_a_busy_port_says_so_before_looking_for_gpus(tmp_path, monkeypatch):
    import apportion.serve.base.slots

    looked = []
    monkeypatch.setattr(apportion.serve.base.slots, "detect_gpus", lambda: looked.append(True) or [])
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = cli("serve", "--state-dir", str(tmp_path / "state"), "--port", str(port), *AS_ROOT)

    assert result.exit_code == 2
    assert result.output.strip() == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert looked == [] and not (tmp_path / "state").exists()


@pytest.mark.parametrize("args, message", [
    (["--slots", "cpu:zero"], "error: --slots: 'cpu:zero' is not TYPE:COUNT (e.g. 'cpu:2' or 'h100:4')"),
    (["--policy", "nope"], "error: unknown policy 'nope'"),
    (["--policy", "min-cost", "--slots", "cpu:1"], "error: min-cost needs a positive price per GPU-hour"),
    (["--policy", "fifo", "--las-thresholds", "5"], "error: --las-thresholds applies to las only"),
    (["--round-s", "0"], "error: --round-s must be positive"),
    (["--market", "synthetic"], "error: --market needs --executor ray: rented instances join a Ray cluster"),
    (["--executor", "ray", "--market", "synthetic"], "error: --market needs --cluster FILE whose ray.gpu_types"),
])
def test_serve_option_errors(tmp_path, args, message):
    result = cli("serve", "--state-dir", str(tmp_path), "--port", "0", *args)
    assert result.exit_code == 2
    assert result.output.strip().startswith(message), result.output


def test_serve_takes_its_settings_from_a_config_file_and_flags_over_it(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("policy: max-min-fairness\nshare_by: rate\nslots: cpu:3\nround_s: 45\n"
                      "state_dir: not-this-one\n")
    with Server(tmp_path / "state", "--config", str(config), "--round-s", "30") as running:
        status = httpx.get(f"{running.url}/status", timeout=10).json()

    assert status["policy"] == "max-min-fairness" and status["round_s"] == 30.0
    assert [s["id"] for s in status["slots"]] == ["cpu:0", "cpu:1", "cpu:2"]
    assert status["state_dir"] == str(tmp_path / "state")  # Server gives --state-dir: the flag wins
    assert not (tmp_path / "not-this-one").exists()


def test_submit_a_command_without_a_job_file_and_wait_for_it(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("submit", "--steps", "20", "--env", "STEP_S=0.01", "--user", "ann", "--wait", "--server", server.url,
                 "--", sys.executable, str(CONTRACT_JOB))
    assert result.exit_code == 0, result.output
    job_id = re.search(r"submitted job (\d+): contract_job \(ann, 1 slot\(s\), 20 steps\)", result.output).group(1)
    assert result.output.splitlines()[-1] == f"job {job_id} (contract_job) completed"
    assert job(server, job_id)["steps_done"] == 20


def test_wait_exits_124_after_its_timeout_and_1_for_a_cancelled_job(server, tmp_path):
    job_id = submit(server, job_file(tmp_path, "slow", steps=100000, STEP_S="0.05"))
    late = cli("wait", job_id, "--timeout", "0.5", "--server", server.url)
    assert late.exit_code == 124
    assert re.fullmatch(rf"job {job_id} had not ended after 0.5 s: (queued|running), \d+/100000 steps", late.stderr.strip())
    cli("cancel", job_id, "--user", "ann", "--server", server.url)
    ended = cli("wait", job_id, "--server", server.url)
    assert ended.exit_code == 1 and ended.stdout.startswith(f"job {job_id} (slow) cancelled")


def test_blocks_add_list_and_a_job_that_claims_budget_submitted_with_flags(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    added = cli("blocks", "add", "mon", "--epsilon", "1", "--delta", "1e-6", "--server", server.url)
    assert added.exit_code == 0 and added.stdout.strip() == "added 1 block: mon", added.output
    (tmp_path / "blocks.csv").write_text("block,arrival_s,epsilon,delta\ntue,0,2,1e-6\nwed,86400,2,1e-6\n")
    assert cli("blocks", "add", "--file", "blocks.csv", "--server", server.url).stdout.strip() == "added 2 blocks: tue, wed"
    taken = cli("blocks", "add", "mon", "--epsilon", "1", "--delta", "0", "--server", server.url)
    assert taken.exit_code == 2 and "block 'mon' exists already" in taken.output

    result = cli("submit", "--steps", "20", "--env", "STEP_S=0.01", "--user", "ann", "--privacy", "mon,tue:0.25",
                 "--wait", "--server", server.url, "--", sys.executable, str(CONTRACT_JOB))
    assert result.exit_code == 0, result.output
    listed = json.loads(cli("blocks", "list", "--json", "--server", server.url).stdout)
    assert listed["policy"] == "fcfs"
    assert [(b["name"], b["consumed"], b["left"]) for b in listed["blocks"]] == [
        ("mon", 0.25, 0.75), ("tue", 0.25, 1.75), ("wed", 0.0, 2.0)]
    table = cli("blocks", "list", "--server", server.url).stdout
    assert re.search(r"mon\s+1\s+1e-06\s+1\s+0\s+0\.25\s+0\.75\s+1\s+0", table), table
    assert "privacy blocks (fcfs)" in cli("queue", "--server", server.url).stdout
    refused = cli("submit", "--steps", "20", "--user", "ann", "--privacy", "mon:2", "--server", server.url, "--", "true")
    assert refused.exit_code == 2
    assert "--privacy: can never be granted: block mon has ε 0.75, δ 1e-06 left of its budget" in refused.output
