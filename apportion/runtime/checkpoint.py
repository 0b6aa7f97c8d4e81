"""CheckFreq-style checkpoints: snapshot to host memory now, write in the background.

``snapshot(state, step)`` copies every tensor of ``state`` to CPU memory before it returns
(training may then change the originals), and a background thread serialises the copy to a
temporary file in the checkpoint directory, fsyncs it and renames it to
``step-XXXXXXXX.pt`` with ``os.replace``. A reader sees either the whole file or none of it:
a writer killed mid-write leaves only a temporary file, which :meth:`Checkpointer.latest`
ignores and the next Checkpointer deletes. The newest ``keep`` checkpoints are kept.

torch is never imported here: a state holds tensors only if the job imported torch, so the
module is looked up in ``sys.modules``. Files are written with ``torch.save`` when torch is
loaded and with ``pickle`` otherwise; ``load`` tells them apart by their first bytes.
"""

from __future__ import annotations

import copy
import os
import pickle
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = "apportion-checkpoint/1"
CHECKPOINT_RE = re.compile(r"^step-(\d{8,})\.pt$")
TEMP_PREFIX = ".tmp-step-"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's zip container


def checkpoint_name(step: int) -> str:
    return f"step-{int(step):08d}.pt"


ANY_CHECKPOINT_RE = re.compile(r"^step-(\d{8,})\.[A-Za-z0-9]+$")  # step-XXXXXXXX.pt, or another format's


def newest_step(directory: str | os.PathLike) -> int | None:
    """The step of the newest complete checkpoint in ``directory`` (by name only), or None.

    What a server reads to tell from which step a job will resume: it counts every
    ``step-XXXXXXXX.EXT`` file (``.pt`` for apportion.runtime), never a temporary one.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    steps = [int(m.group(1)) for m in map(ANY_CHECKPOINT_RE.match, names) if m]
    return max(steps) if steps else None


def to_host(obj: Any) -> Any:
    """A copy of ``obj`` that shares no memory with it; tensors copied to CPU memory."""
    torch = sys.modules.get("torch")
    return _to_host(obj, torch.Tensor if torch is not None else None)


def _to_host(obj: Any, tensor_type) -> Any:
    if tensor_type is not None and isinstance(obj, tensor_type):
        return obj.detach().to("cpu", copy=True)
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return obj
    if isinstance(obj, dict):
        try:
            new = type(obj)()
        except TypeError:
            new = {}
        for key, value in obj.items():
            new[key] = _to_host(value, tensor_type)
        if getattr(obj, "__dict__", None) and new is not obj:  # e.g. a state_dict's _metadata
            try:
                new.__dict__.update(copy.deepcopy(obj.__dict__))
            except (AttributeError, TypeError):
                pass
        return new
    if isinstance(obj, list):
        return [_to_host(v, tensor_type) for v in obj]
    if isinstance(obj, tuple):
        items = [_to_host(v, tensor_type) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return copy.deepcopy(obj)


class Checkpointer:
    """Writes and finds the checkpoints of one job in ``directory``.

    One write is in flight at a time: a ``snapshot`` while the previous write runs waits
    for it first. ``wait()`` joins the writer and re-raises its error, if any.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        keep: int = 2,
        *,
        fsync: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.fsync = fsync
        self._log = log or (lambda message: None)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._abort = threading.Event()
        self._written: Path | None = None
        self.last_snapshot_s: float | None = None  # time the last snapshot held training up
        self.last_write_s: float | None = None  # time its background write took
        self._remove_temp_files()

    # --- finding -----------------------------------------------------------------------
    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoints, oldest first, as ``(step, path)``."""
        found = []
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        for entry in entries:
            match = CHECKPOINT_RE.match(entry.name)
            if match and entry.is_file():
                found.append((int(match.group(1)), Path(entry.path)))
        return sorted(found)

    def latest(self) -> Path | None:
        """The newest complete checkpoint (by step number), or None."""
        found = self.checkpoints()
        return found[-1][1] if found else None

    # --- reading -----------------------------------------------------------------------
    @staticmethod
    def load(path: str | os.PathLike) -> tuple[int, Any]:
        """``(step, state)`` from one checkpoint file; tensors land in CPU memory.

        Files are unpickled in full (``weights_only=False``): a job loads only the files it
        wrote itself, and states may hold numpy arrays or random-generator states.
        """
        path = Path(path)
        with open(path, "rb") as f:
            magic = f.read(4)
            f.seek(0)
            if magic == _ZIP_MAGIC:
                import torch

                payload = torch.load(f, map_location="cpu", weights_only=False)
            else:
                payload = pickle.load(f)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError(f"{path} is not an apportion checkpoint")
        return int(payload["step"]), payload["state"]

    def load_latest(self) -> tuple[int, Any, Path] | None:
        """``(step, state, path)`` of the newest checkpoint that loads, or None.

        A file that fails to load (it cannot be torn, but a disk can fail) is reported and
        the next older one is tried.
        """
        for step, path in reversed(self.checkpoints()):
            try:
                loaded_step, state = self.load(path)
            except Exception as exc:  # noqa: BLE001 - fall back to an older checkpoint
                self._log(f"cannot load {path.name} ({type(exc).__name__}: {exc}); trying an older one")
                continue
            return loaded_step, state, path
        return None

    # --- writing -----------------------------------------------------------------------
    def snapshot(self, state: Any, step: int) -> None:
        """Copy ``state`` to host memory now; write it as ``step-XXXXXXXX.pt`` in the background."""
        self.wait()
        start = time.perf_counter()
        payload = {"format": FORMAT, "step": int(step), "time": time.time(), "state": to_host(state)}
        self.last_snapshot_s = time.perf_counter() - start
        self._abort.clear()
        self._written = None
        self._thread = threading.Thread(
            target=self._write, args=(payload, int(step)), name=f"checkpoint-{step}", daemon=True
        )
        self._thread.start()

    def save(self, state: Any, step: int) -> Path:
        """Snapshot and wait for the write; the path of the new checkpoint."""
        self.snapshot(state, step)
        path = self.wait()
        assert path is not None
        return path

    def wait(self) -> Path | None:
        """Join the writer; the path it wrote (None if none); re-raises its error."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(f"writing a checkpoint to {self.directory} failed: {error}") from error
        return self._written

    @property
    def writing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def abort(self) -> None:
        """Make an in-flight write end without renaming its file (a stale attempt's exit)."""
        self._abort.set()

    def _write(self, payload: dict, step: int) -> None:
        start = time.perf_counter()
        final = self.directory / checkpoint_name(step)
        temp = self.directory / f"{TEMP_PREFIX}{step:08d}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            with open(temp, "wb") as f:
                torch = sys.modules.get("torch")
                if torch is not None:
                    torch.save(payload, f)
                else:
                    pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            if self._abort.is_set():
                temp.unlink(missing_ok=True)
                return
            os.replace(temp, final)
            if self.fsync:
                _fsync_dir(self.directory)
            self._written = final
            self.last_write_s = time.perf_counter() - start
            self.prune()
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            self._error = exc
            try:
                temp.unlink(missing_ok=True)
            except OSError:
                pass

    def prune(self) -> None:
        """Delete all but the newest ``keep`` complete checkpoints."""
        for _, path in self.checkpoints()[: -self.keep]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def _remove_temp_files(self) -> None:
        for entry in os.scandir(self.directory):
            if entry.name.startswith(TEMP_PREFIX) and entry.is_file():
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
