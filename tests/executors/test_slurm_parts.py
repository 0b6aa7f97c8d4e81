"""The Slurm executor's parts that need no Slurm: what it reads of `scontrol`'s nodes and jobs, the nodes it
pins an attempt to, its sbatch command line, a rank's environment, and the serve settings that name it."""

from __future__ import annotations

import pytest

from apportion.executors.slurm.executor import _slurm_code, batch_script, combined, sbatch_argv
from apportion.executors.slurm.nodes import choose_nodes, expand_hostlist, gres_counts, online, parse_jobs, parse_nodes
from apportion.executors.slurm.task import rank_env, tasks_on_nodes
from apportion.serve.accounts.runas import Account
from apportion.serve.app.settings import ServeSettings, SettingError, check_settings

NODES = """\
NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=8 CPUTot=8 Gres=gpu:h100:4 GresDrain=N/A GresUsed=gpu:h100:3(IDX:0-2) RealMemory=4000 State=MIXED Partitions=gpus,all
NodeName=n2 Arch=x86_64 CPUTot=8 Gres=gpu:h100:4 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) RealMemory=4000 State=IDLE+DRAIN Partitions=gpus Reason=maintenance [root@2026-12-07T15:38:32]
NodeName=n3 Arch=x86_64 CPUTot=8 Gres=gpu:h100:4 GresUsed=gpu:h100:1(IDX:0) RealMemory=4000 State=MIXED Partitions=gpus
NodeName=c1 Arch=x86_64 CPUTot=64 Gres=(null) RealMemory=4000 State=IDLE Partitions=cpu
"""
JOBS = """\
JobId=7 JobName=apportion.abc.1.1 JobState=RUNNING NodeList=n1 JOB_GRES=gpu:h100:2   Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:0-1) MinCPUsNode=1
JobId=8 JobName=someone-else JobState=RUNNING NodeList=n[1,3] JOB_GRES=gpu:h100:2   Nodes=n[1,3] CPU_IDs=2 Mem=0 GRES=gpu:h100:1(IDX:2) MinCPUsNode=1
JobId=9 JobName=waiting JobState=PENDING NodeList=(null)
"""


def test_nodes_say_their_gpus_state_and_partitions():
    n1, n2, n3, c1 = parse_nodes(NODES)
    assert (n1.name, n1.gpus, n1.used, n1.cpus, n1.memory_mb, n1.partitions) == (
        "n1", {"h100": 4}, {"h100": 3}, 8, 4000, ("gpus", "all"))
    assert n1.usable and not n2.usable and n2.reason.startswith("maintenance")
    assert c1.gpus == {}


def test_a_drained_node_and_others_jobs_gpus_are_offline_for_apportion():
    nodes = parse_nodes(NODES)
    others = [j for j in parse_jobs(JOBS) if not j.name.startswith("apportion.abc.")]
    # n1: 4 less someone-else's 1; n2 drained; n3: 4 less someone-else's 1. apportion's own job counts as its own
    assert online(nodes, {"h100": "h100"}, others) == {"h100": 6}


def test_an_attempt_goes_to_the_fewest_nodes_that_have_an_even_share_of_its_gpus_free():
    nodes = parse_nodes(NODES)  # free: n1 1, n2 4 but drained, n3 3
    assert choose_nodes(nodes, "h100", 1) == ["n1"]  # the fullest node that holds it
    assert choose_nodes(nodes, "h100", 3) == ["n3"]
    assert choose_nodes(nodes, "h100", 2) == ["n3"]
    assert choose_nodes(nodes, "h100", 4) is None  # 1+3 is no even split, and never the drained n2: Slurm places it
    assert choose_nodes(parse_nodes(NODES.replace("State=IDLE+DRAIN", "State=IDLE")), "h100", 4) == ["n2"]
    two = NODES.replace("GresUsed=gpu:h100:3(IDX:0-2)", "GresUsed=gpu:h100:2(IDX:0-1)")
    assert choose_nodes(parse_nodes(two), "h100", 4) == ["n1", "n3"]  # 2 + 2
    # an attempt submitted a moment ago holds n3's GPUs before Slurm counts them used
    assert choose_nodes(nodes, "h100", 1, held={"n1": 1}) == ["n3"]
    assert choose_nodes(nodes, "h100", 3, held={"n3": 1}) is None


def test_slurm_host_lists_and_gres_are_read_as_slurm_writes_them():
    assert expand_hostlist("n[1-3,5],gpu07,g[08-10]") == ["n1", "n2", "n3", "n5", "gpu07", "g08", "g09", "g10"]
    assert gres_counts("gpu:h100:2(S:0-1),gpu:a100:1,gpu:3") == {"h100": 2, "a100": 1, "gpu": 3}
    assert tasks_on_nodes("2(x3),1") == [2, 2, 2, 1]


def test_sbatch_pins_the_nodes_and_runs_a_mapped_users_job_as_that_user():
    common = dict(name="apportion.abc.3.2", slots=("h100:0", "h100:1"), slurm_type="h100", nodes=["n1"],
                  partition="gpus", account="lab", output="/s/jobs/3/attempt-2.slurm.log", workdir="/s/jobs/3")
    argv = sbatch_argv(**common, cpus=8, memory_gb=3)
    assert {"--nodelist=n1", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--gres=gpu:h100:2",
            "--partition=gpus", "--account=lab", "--cpus-per-task=4", "--mem=3072M", "--no-requeue"} <= set(argv)
    spread = sbatch_argv(**dict(common, slots=("h100:0", "h100:1", "h100:2", "h100:3"), nodes=["n1", "n3"]),
                         memory_gb=4)
    assert {"--nodelist=n1,n3", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--gres=gpu:h100:2",
            "--mem=2048M"} <= set(spread)
    assert "--comment=apportion slots=h100:0,h100:1" in argv
    mapped = sbatch_argv(**common, run_as=Account("ann", 1001, 1001))
    assert "--uid=1001" in mapped and "--gid=1001" in mapped
    assert not any(a.startswith("--account") for a in mapped)  # charged to ann's own default account


def test_the_batch_script_runs_one_task_a_rank_through_the_wrapper():
    import signal

    from apportion.executors.slurm.executor import signal_options

    script = batch_script("/usr/bin/python3", "/s/jobs/3", 2, 4, ["--job", "3", "--", "python", "train.py", "a b"])
    assert "exec srun --ntasks=4 --kill-on-bad-exit=0" in script
    assert "apportion.executors.slurm.task --job-dir /s/jobs/3 --attempt 2 -- --job 3 -- python train.py 'a b'" in script
    alone = batch_script("/usr/bin/python3", "/s/jobs/3", 2, 1, ["--job", "3", "--", "python", "train.py"])
    assert alone == ("#!/bin/sh\nexec /usr/bin/python3 -m apportion.executors.slurm.task --job-dir /s/jobs/3"
                     " --attempt 2 -- --job 3 -- python train.py\n")  # one rank: in the batch step, no srun
    assert signal_options(1, signal.SIGTERM) == ["--signal=TERM", "--full"]  # the batch step and its children
    assert signal_options(4, signal.SIGTERM) == ["--signal=TERM"]  # the srun step's tasks, once
    assert signal_options(4, signal.SIGKILL) == ["--signal=KILL", "--full"]


def test_a_rank_gets_torch_distributeds_variables_from_slurms():
    slurm = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
             "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.5", "SLURM_JOB_ID": "42",
             "CUDA_VISIBLE_DEVICES": "1"}
    env = rank_env({"FOO": "bar", "CUDA_VISIBLE_DEVICES": ""}, dict(slurm, CUDA_VISIBLE_DEVICES="0,1"))
    assert env == {"FOO": "bar", "CUDA_VISIBLE_DEVICES": "1", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": str(29500 + 42)}
    alone = rank_env({"FOO": "bar"}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert alone == {"FOO": "bar"}  # one rank: no torch.distributed variables, as on this machine


def test_an_attempts_code_is_its_first_crash_else_preempted_else_done():
    assert combined({0: 0, 1: 75}) == 75
    assert combined({0: 75, 1: 3, 2: 1}) == 3
    assert combined({0: 0, 1: 0}) == 0
    assert (_slurm_code("0:15"), _slurm_code("2:0"), _slurm_code("")) == (-15, 2, None)


@pytest.mark.parametrize("settings, key", [
    (ServeSettings(slurm_partition="gpus"), "slurm_partition"),  # needs --executor slurm
    (ServeSettings(executor="slurm", slurm_account="lab; rm -rf /"), "slurm_account"),
    (ServeSettings(executor="slurm", slots="h100:2"), "slots"),  # the partition's GPUs are the slots
    (ServeSettings(executor="slurm", cluster="c.yaml"), "cluster"),
])
def test_serve_settings_refuse_what_slurm_cannot_use(settings, key):
    with pytest.raises(SettingError) as caught:
        check_settings(settings)
    assert caught.value.key == key


def test_serve_settings_take_a_slurm_partition_and_account():
    check_settings(ServeSettings(executor="slurm", slurm_partition="gpus", slurm_account="lab"))


def test_slurms_accounting_is_read_per_attempt_from_its_job_completion_file(tmp_path):
    from apportion.executors.slurm.accounting import from_jobcomp, gpu_seconds

    path = tmp_path / "jobcomp.txt"
    path.write_text(
        "JobId=4 UserId=root(0) GroupId=root(0) Name=apportion.abc.2.1 JobState=COMPLETED Partition=gpus"
        " TimeLimit=525600 StartTime=2026-12-07T15:38:33 EndTime=2026-12-07T15:38:45 NodeList=n1 NodeCnt=1\n"
        "JobId=5 UserId=root(0) GroupId=root(0) Name=apportion.abc.2.2 JobState=FAILED Partition=gpus"
        " TimeLimit=525600 StartTime=2026-12-07T15:39:00 EndTime=2026-12-07T15:39:03 NodeList=n1 NodeCnt=1\n"
        "JobId=6 UserId=root(0) GroupId=root(0) Name=someone-else JobState=COMPLETED StartTime=2026-12-07T15:39:00"
        " EndTime=2026-12-07T15:49:00\n")
    accounted = from_jobcomp(path, "apportion.abc.")
    assert [(a.job_id, a.attempt, a.state, a.elapsed_s) for a in accounted] == [
        (2, 1, "COMPLETED", 12.0), (2, 2, "FAILED", 3.0)]
    assert gpu_seconds(accounted, {2: 4}) == {2: 60.0}


class _Verdicts:
    """Slurm's commands answered as a job that ended with ``state`` and no exit record says."""

    def __init__(self, state: str, code: str = "0:0") -> None:
        self.state, self.code, self.asked = state, code, []

    def run(self, *argv: str, **_) -> str:
        self.asked.append(argv[:2])
        if argv[0] == "squeue":
            return ""  # gone from the queue
        if argv[:3] == ("scontrol", "show", "job"):
            return f"JobId=9 JobName=x JobState={self.state} Reason=None ExitCode={self.code} NodeList=n1"
        return ""


@pytest.mark.parametrize("state, code, lost, exit_code", [
    ("NODE_FAIL", "0:0", "its Slurm node failed", None),
    ("TIMEOUT", "0:15", "Slurm ended it at its time limit", None),
    ("PREEMPTED", "0:15", "Slurm preempted it", None),
    ("FAILED", "2:0", "", 2),
    ("OUT_OF_MEMORY", "0:9", "", -9),
])
def test_a_job_slurm_ended_without_an_exit_record_ends_as_slurm_says(tmp_path, state, code, lost, exit_code):
    from apportion.executors.base import Attempt
    from apportion.executors.slurm.executor import SlurmExecutor, _Attempt

    executor = SlurmExecutor(tmp_path, {"h100": "h100"}, poll_every_s=0.0)
    executor.slurm = _Verdicts(state, code)
    executor._tracked[3] = _Attempt(Attempt(3, 1, None, None, ("h100:0",)), "9", 0.0, "RUNNING")
    (ended,) = executor.poll()
    assert (ended.job_id, ended.code, ended.lost) == (3, exit_code, lost)


def test_slurms_own_messages_show_under_the_log_only_when_the_attempt_left_no_exit_record(tmp_path):
    from apportion.executors.slurm.executor import SlurmExecutor

    executor = SlurmExecutor(tmp_path, {"h100": "h100"})
    directory = executor.job_dir(4)
    directory.mkdir(parents=True)
    (directory / "attempt-1.log").write_text("step 10\n")
    (directory / "attempt-1.slurm.log").write_text("slurmstepd: error: *** JOB 9 ON n1 CANCELLED DUE TO TIME LIMIT ***\n")
    assert executor.tail(4, 1) == "step 10\nslurmstepd: error: *** JOB 9 ON n1 CANCELLED DUE TO TIME LIMIT ***"
    (directory / "attempt-1.exit").write_text('{"code": 75}')
    assert executor.tail(4, 1) == "step 10"  # recorded: srun's "task 0: Killed" after it says nothing
