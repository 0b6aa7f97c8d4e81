import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from apportion.runtime import Checkpointer
from apportion.runtime.checkpoint import TEMP_PREFIX, Intact, checkpoint_name, newest_intact

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_save_is_atomic_named_by_step_and_round_trips(tmp_path):
    ckpt = Checkpointer(tmp_path)
    model = torch.nn.Linear(3, 2)
    state = {"model": model.state_dict(), "step_note": [1, (2, 3)], "name": "x"}
    path = ckpt.save(state, 12)
    assert path == tmp_path / "step-00000012.pt"
    assert files(tmp_path) == ["step-00000012.pt", "step-00000012.pt.sha256"]  # no temporary file left behind
    step, loaded = Checkpointer.load(path)
    assert step == 12 and loaded["step_note"] == [1, (2, 3)] and loaded["name"] == "x"
    again = torch.nn.Linear(3, 2)
    again.load_state_dict(loaded["model"])  # a state_dict keeps its metadata through the copy
    assert torch.equal(again.weight, model.weight)


def test_snapshot_copies_before_returning_so_training_may_go_on(tmp_path):
    ckpt = Checkpointer(tmp_path)
    weight = torch.zeros(1000)
    ckpt.snapshot({"w": weight}, 1)
    weight += 1  # the next training step changes the tensor while the write may be running
    ckpt.wait()
    _, state = Checkpointer.load(ckpt.latest())
    assert torch.count_nonzero(state["w"]) == 0
    assert state["w"].data_ptr() != weight.data_ptr()


def test_newest_complete_checkpoint_wins_and_leftover_temp_files_are_ignored(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    ckpt.save({"v": 5}, 5)
    ckpt.save({"v": 10}, 10)
    leftover = tmp_path / f"{TEMP_PREFIX}00000020-1234-abcd"  # a writer killed mid-write
    leftover.write_bytes(b"PK\x03\x04 torn")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert ckpt.latest() == tmp_path / checkpoint_name(10)
    step, state, path = ckpt.load_latest()
    assert (step, state) == (10, {"v": 10})
    Checkpointer(tmp_path)  # a new attempt's Checkpointer removes the leftover
    assert not leftover.exists()


def test_steps_sort_numerically_and_an_unreadable_newest_file_falls_back(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=5)
    ckpt.save({"v": 9}, 9)
    ckpt.save({"v": 100_000_000}, 100_000_000)  # nine digits sort after eight
    assert ckpt.latest().name == "step-100000000.pt"
    ckpt.latest().write_bytes(b"\x80garbage")  # a damaged disk, not a torn write
    messages = []
    step, state, _ = Checkpointer(tmp_path, log=messages.append).load_latest()
    assert (step, state) == (9, {"v": 9}) and "step-100000000.pt" in messages[0]


def test_only_the_newest_keep_checkpoints_remain(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=2)
    for step in range(1, 6):
        ckpt.save({"step": step}, step)
    assert files(tmp_path) == ["step-00000004.pt", "step-00000004.pt.sha256", "step-00000005.pt", "step-00000005.pt.sha256"]


def test_a_failed_write_is_reported_by_wait_and_leaves_nothing(tmp_path):
    ckpt = Checkpointer(tmp_path)
    ckpt.snapshot({"f": lambda: None}, 3)  # cannot be pickled
    with pytest.raises(RuntimeError, match="writing a checkpoint"):
        ckpt.wait()
    assert files(tmp_path) == []


def test_killing_the_writer_mid_write_never_leaves_a_torn_checkpoint(tmp_path):
    # A child process (no torch: the pickle path) writes step 1, then starts writing step 2:
    # 20 MB reach the temporary file and the writer stalls; the test kills the process there.
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from apportion.runtime import Checkpointer

        class Stall:
            def __deepcopy__(self, memo):
                return Stall()
            def __getstate__(self):
                print("writing", flush=True)
                time.sleep(60)
                return {{}}

        ckpt = Checkpointer({str(tmp_path)!r})
        ckpt.save({{"v": 1}}, 1)
        ckpt.snapshot({{"big": b"x" * 20_000_000, "stall": Stall()}}, 2)
        ckpt.wait()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]
        assert len(temps) == 1 and temps[0].stat().st_size >= 20_000_000  # half a file on disk
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    ckpt = Checkpointer(tmp_path)
    assert ckpt.latest().name == "step-00000001.pt"
    assert ckpt.load_latest()[:2] == (1, {"v": 1})
    assert files(tmp_path) == ["step-00000001.pt", "step-00000001.pt.sha256"]


def test_runtime_imports_neither_torch_nor_numpy_and_pickles_without_torch(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from apportion.runtime import Checkpointer, Job, ResumableSampler
        ckpt = Checkpointer({str(tmp_path)!r})
        path = ckpt.save({{"sampler": ResumableSampler(4, 1).state()}}, 7)
        assert open(path, "rb").read(1) == b"\\x80"  # a pickle, not torch's zip
        assert Checkpointer.load(path)[0] == 7
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy")))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def flip_a_weight(path: Path) -> None:
    """A damaged disk: one byte of a tensor's data changes, and torch.load still loads it."""
    data = bytearray(path.read_bytes())
    data[data.find(bytes(400)) + 100] ^= 0x3F
    path.write_bytes(data)


def test_each_checkpoint_has_its_sha256_beside_it_as_sha256sum_writes_it(tmp_path):
    path = Checkpointer(tmp_path).save({"w": torch.zeros(1000)}, 12)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "step-00000012.pt.sha256").read_text() == f"{digest}  step-00000012.pt\n"


def test_a_checkpoint_whose_bytes_changed_is_set_aside_and_the_older_one_restored(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    ckpt.save({"w": torch.zeros(1000)}, 10)
    flip_a_weight(ckpt.save({"w": torch.zeros(1000)}, 20))
    messages = []
    restorer = Checkpointer(tmp_path, log=messages.append)
    step, state, path = restorer.load_latest()
    assert (step, path.name, int(torch.count_nonzero(state["w"]))) == (10, "step-00000010.pt", 0)
    assert restorer.skipped[0].startswith("step-00000020.pt: checksum mismatch: its SHA-256 is ")
    assert messages[0].startswith("skipping step-00000020.pt: checksum mismatch")
    assert files(tmp_path) == ["step-00000010.pt", "step-00000010.pt.sha256", "step-00000020.pt.corrupt"]


def test_a_checkpoint_without_a_checksum_an_older_apportions_still_loads(tmp_path):
    Checkpointer(tmp_path).save({"w": torch.ones(3)}, 7)
    (tmp_path / "step-00000007.pt.sha256").unlink()
    step, state, _ = Checkpointer(tmp_path).load_latest()
    assert step == 7 and torch.equal(state["w"], torch.ones(3))
    assert newest_intact(tmp_path) == Intact(7)
