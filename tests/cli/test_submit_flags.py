"""`apportion submit` without a job file (flags and the command after --), and flags over a job
file: the job the server is sent, and errors that name the flag (the client's submit is replaced
by one that records what it was given)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.cli.submit_flags import FLAGS
from apportion.serve.client import Client, ClientError
from apportion.serve.jobs.jobspec import FIELDS

runner = CliRunner()


@pytest.fixture()
def sent(monkeypatch, tmp_path):
    """The specs `submit` sends, in order; the server answers job 7 for each."""
    specs = []

    def record(self, spec, user=None):
        specs.append(spec)
        return {"id": "7", "user": user}

    monkeypatch.setattr(Client, "submit", record)
    monkeypatch.chdir(tmp_path)
    return specs


def submit(*args: str):
    return runner.invoke(app, ["submit", "--user", "ann", *args])


def test_a_command_after_dashes_is_a_job_named_after_its_script(sent, tmp_path):
    result = submit("--gpus", "2", "--steps", "1000", "--env", "LR=3e-4", "--gpu-type", "v100,h100", "--gpu-type", "a100",
                    "--priority", "0.5", "--queue", "research", "--after", "3,4", "--time-limit", "12h",
                    "--", "python", "train.py", "--lr", "3e-4")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "submitted job 7: train (ann, 2 slot(s), 1000 steps)"
    spec = sent[0]
    assert spec.command == ["python", "train.py", "--lr", "3e-4"]  # argv as given: --lr is the job's, not submit's
    assert (spec.name, spec.gpus, spec.total_steps, spec.priority, spec.queue) == ("train", 2, 1000, 0.5, "research")
    assert (spec.env, spec.gpu_types, spec.after, spec.time_limit) == ({"LR": "3e-4"}, ("v100", "h100", "a100"),
                                                                       (3, 4), 43200.0)
    assert spec.workdir == str(tmp_path)


@pytest.mark.parametrize("command, name", [
    (["python", "-m", "pkg.train", "--epochs", "3"], "pkg.train"),
    (["bash", "scripts/run.sh"], "run"),
    (["./trainer", "--fast"], "trainer"),
])
def test_the_name_is_the_script_s_unless_given(sent, command, name):
    assert submit("--steps", "10", "--", *command).exit_code == 0
    assert submit("--steps", "10", "--name", "mine", "--", *command).exit_code == 0
    assert [s.name for s in sent] == [name, "mine"]


def test_flags_override_a_job_file_and_env_merges(sent, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: cnn\ncommand: python cnn.py\nepochs: 2\nsteps_per_epoch: 50\nqueue: q1\n"
                   "env: {A: file, B: file}\n")
    result = submit(str(job), "--gpus", "4", "--steps", "30", "--env", "B=flag", "--env", "C=flag")

    assert result.exit_code == 0, result.output
    spec = sent[0]
    assert (spec.name, spec.command, spec.queue) == ("cnn", "python cnn.py", "q1")  # what no flag set is the file's
    assert (spec.gpus, spec.total_steps) == (4, 30)  # --steps replaces epochs × steps_per_epoch
    assert spec.env == {"A": "file", "B": "flag", "C": "flag"}


def test_a_command_after_dashes_replaces_the_file_s(sent, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: cnn\ncommand: python cnn.py\ntotal_steps: 5\n")
    assert submit(str(job), "--", "python", "other.py").exit_code == 0
    assert sent[0].command == ["python", "other.py"] and sent[0].name == "cnn"


@pytest.mark.parametrize("flags, error", [
    (["--gpus", "two"], "--gpus: must be a whole number from 1 to 1,048,576, got 'two' (a string)"),
    (["--gpus", "0"], "--gpus: must be a whole number from 1 to 1,048,576, got 0"),
    (["--priority", "2000"], "--priority: must be a number from 0 to 1000, got 2000"),
    (["--env", "LR"], "--env: must be NAME=VALUE, got 'LR'"),
    (["--env", "APPORTION_TOKEN=x"], "--env APPORTION_TOKEN: is set by the server for every attempt; a job may "
                                     "not set it"),
    (["--after", "3,x"], "--after: must be a whole number from 1 to 9,223,372,036,854,775,807, got 'x' (a string)"),
    (["--time-limit", "soon"], "--time-limit: must be seconds, or a number with a unit s, m, h or d (90m, 12h), "
                               "got 'soon'"),
    (["--gpu-type", "v100,"], "--gpu-type: must be a GPU type name, got ''"),
    (["--notify", "ftp://x"], "--notify: must be an http:// or https:// URL, got scheme 'ftp'"),
])
def test_an_error_names_the_flag_and_nothing_is_sent(sent, flags, error):
    result = submit("--steps", "10", *flags, "--", "python", "train.py")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {error}"
    assert sent == []


def test_an_error_in_the_file_names_its_line_and_a_flag_can_mend_it(sent, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: cnn\ncommand: python cnn.py\ntotal_steps: 5\ngpus: lots\n")
    broken = submit(str(job), "--queue", "q")
    assert broken.exit_code == 2
    assert broken.stderr.strip() == f"error: {job}:4: field 'gpus': must be a whole number from 1 to 1,048,576, got 'lots' (a string)"
    assert submit(str(job), "--gpus", "1").exit_code == 0 and sent[0].gpus == 1


@pytest.mark.parametrize("args, error", [
    (["--gpus", "2"], "a job without a job file needs --steps N and the command after --, as in apportion submit "
                      "--steps 1000 -- python train.py"),
    (["--steps", "10"], "a job without a job file needs the command after --, as in apportion submit --steps 1000 "
                        "-- python train.py"),
    (["--", "python", "train.py"], "a job without a job file needs --steps N, as in apportion submit --steps 1000 "
                                   "-- python train.py"),
    (["--steps", "10", "--"], "nothing after --: give the command to run, as in apportion submit --steps 1000 -- "
                              "python train.py"),
    (["--steps", "10", "python", "train.py"], "one job file at most, then 'train.py': a command goes after --, as "
                                              "in apportion submit --steps 1000 -- python train.py"),
    (["--steps", "10", "train.py"], "train.py is a script, not a job file: put the command after --, as in "
                                    "apportion submit --steps 1000 -- python train.py"),
])
def test_what_is_missing_is_said(sent, args, error):
    result = submit(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {error}"


def test_the_server_s_refusal_names_the_flag_or_the_file_s_line(monkeypatch, tmp_path):
    def refuse(self, spec, user=None):
        raise ClientError("field 'gpus': asks for 3", "gpus", "asks for 3; the most this server has of an allowed "
                                                                "type is 2 (cpu)", 400)

    monkeypatch.setattr(Client, "submit", refuse)
    by_flag = submit("--gpus", "3", "--steps", "10", "--", "python", "train.py")
    assert by_flag.stderr.strip() == "error: --gpus: asks for 3; the most this server has of an allowed type is 2 (cpu)"

    job = tmp_path / "job.yaml"
    job.write_text("name: cnn\ncommand: python cnn.py\ntotal_steps: 5\ngpus: 3\n")
    by_file = submit(str(job), "--queue", "q")
    assert by_file.stderr.strip() == (f"error: {job}:4: field 'gpus': asks for 3; the most this server has of an "
                                      "allowed type is 2 (cpu)")


def test_json_prints_the_id_and_the_user_only(sent):
    result = submit("--steps", "10", "--json", "--", "python", "train.py")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"id": "7", "user": "ann"}


@pytest.mark.parametrize("status, code", [("completed", 0), ("failed", 1), ("cancelled", 1)])
def test_submit_wait_exits_with_how_the_job_ended(sent, monkeypatch, status, code):
    ended = {"id": "7", "name": "train", "status": status, "reason": "" if status == "completed" else "exit 3"}
    monkeypatch.setattr(Client, "wait", lambda self, job_id, timeout=None, poll_s=1.0: ended)
    result = submit("--steps", "10", "--wait", "--", "python", "train.py")
    assert result.exit_code == code
    assert result.stdout.splitlines()[-1] == ("job 7 (train) completed" if code == 0 else f"job 7 (train) {status}: exit 3")


def test_each_flag_sets_a_job_file_field():
    assert {f.field for f in FLAGS} <= set(FIELDS)
    assert len({f.flag for f in FLAGS}) == len(FLAGS)
