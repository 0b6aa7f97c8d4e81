"""CheckFreq-style checkpoints: snapshot to host memory now, write in the background.

``snapshot(state, step)`` copies every tensor of ``state`` to CPU memory before it returns
(training may then change the originals), and a background thread serialises the copy to a
temporary file in the checkpoint directory, fsyncs it and renames it to
``step-XXXXXXXX.pt`` with ``os.replace``. A reader sees either the whole file or none of it:
a writer killed mid-write leaves only a temporary file, which :meth:`Checkpointer.latest`
ignores and the next Checkpointer deletes. The newest ``keep`` checkpoints are kept.

Each checkpoint has its SHA-256 beside it, ``step-XXXXXXXX.pt.sha256`` (``sha256sum``'s
format), computed while the file is written (no second read) and renamed into place before
the checkpoint itself. A restore skips a file whose bytes no longer match it (a damaged disk,
a copy cut short): it is renamed ``….pt.corrupt`` and the next older one is tried. A file
without one (an older apportion's) is loaded unverified.

torch is never imported here: a state holds tensors only if the job imported torch, so the
module is looked up in ``sys.modules``. Files are written with ``torch.save`` when torch is
loaded and with ``pickle`` otherwise; ``load`` tells them apart by their first bytes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pickle
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

FORMAT = "apportion-checkpoint/1"
CHECKPOINT_RE = re.compile(r"^step-(\d{8,})\.pt$")
TEMP_PREFIX = ".tmp-step-"
DIGEST_SUFFIX = ".sha256"  # step-XXXXXXXX.pt.sha256: "<hex>  step-XXXXXXXX.pt", as sha256sum writes it
CORRUPT_SUFFIX = ".corrupt"  # a checkpoint that did not match its digest, kept for a look
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's zip container


def checkpoint_name(step: int) -> str:
    return f"step-{int(step):08d}.pt"


ANY_CHECKPOINT_RE = re.compile(r"^step-(\d{8,})\.[A-Za-z0-9]+$")  # step-XXXXXXXX.pt, or another format's


def digest_path(path: str | os.PathLike) -> Path:
    """Where the SHA-256 of checkpoint ``path`` is kept."""
    path = Path(path)
    return path.with_name(path.name + DIGEST_SUFFIX)


def digest_problem(path: str | os.PathLike, verify_most_bytes: int | None = None) -> str | None:
    """Why checkpoint ``path`` cannot be trusted ("checksum mismatch …", "cannot read …"), or None.

    A file without a digest (an older apportion's) passes if it can be read. Checking a digest
    reads the whole file once (SHA-256, about 1.5 GB/s on one core); a file larger than
    ``verify_most_bytes`` (None: no limit) is only checked to be readable, its digest left to the
    job's own restore.
    """
    path = Path(path)
    try:
        with open(digest_path(path), encoding="utf-8", errors="replace") as f:
            expected = (f.read(200).split() or [""])[0]
    except FileNotFoundError:
        expected = None
    except OSError as err:
        return f"cannot read {digest_path(path).name}: {err.strerror or err}"
    try:
        with open(path, "rb") as f:
            too_big = verify_most_bytes is not None and os.fstat(f.fileno()).st_size > verify_most_bytes
            if expected is None or too_big:
                f.read(1)  # no digest to check here: that it can be read is all there is to know
                return None
            actual = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        return f"cannot read it: {err.strerror or err}"
    if actual != expected.lower():
        return f"checksum mismatch: its SHA-256 is {actual[:12]}…, {digest_path(path).name} says {expected[:12]}…"
    return None


class Intact(NamedTuple):
    """What a checkpoint directory holds for a resume: the step of its newest intact checkpoint."""

    step: int | None  # None: none is intact (or there is none)
    skipped: tuple[str, ...] = ()  # "step-XXXXXXXX.pt: why", newest first, for each newer one passed over
    error: str = ""  # the directory itself could not be listed


def newest_intact(directory: str | os.PathLike, verify_most_bytes: int | None = None) -> Intact:
    """The newest ``step-XXXXXXXX.*`` checkpoint in ``directory`` that reads and matches its digest
    (checked for files up to ``verify_most_bytes``, None: all).

    What a server reads to tell from which step a job will resume; it never unpickles anything.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return Intact(None)
    except OSError as err:
        return Intact(None, error=f"cannot list {directory}: {err.strerror or err}")
    found = sorted(((int(m.group(1)), m.group(0)) for m in map(ANY_CHECKPOINT_RE.match, names) if m), reverse=True)
    skipped = []
    for step, name in found:
        problem = digest_problem(Path(directory) / name, verify_most_bytes)
        if problem is None:
            return Intact(step, tuple(skipped))
        skipped.append(f"{name}: {problem}")
    return Intact(None, tuple(skipped))


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
        self.skipped: list[str] = []  # "step-XXXXXXXX.pt: why" for each newer checkpoint load_latest passed over
        self._unloadable: set[Path] = set()  # passed over, though intact: prune does not count them
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
        """``(step, state, path)`` of the newest checkpoint that matches its digest and loads, or None.

        A file that does not (it cannot be torn, but a disk can fail) is reported, noted in
        ``skipped``, and the next older one is tried; one whose digest does not match is renamed
        ``….pt.corrupt``, so that no later attempt counts it as a checkpoint.
        """
        self.skipped = []
        for step, path in reversed(self.checkpoints()):
            problem = digest_problem(path)
            if problem is None:
                try:
                    loaded_step, state = self.load(path)
                except Exception as exc:  # noqa: BLE001 - fall back to an older checkpoint
                    problem = f"cannot load it ({type(exc).__name__}: {exc})"
                    self._unloadable.add(path)
                else:
                    return loaded_step, state, path
            elif problem.startswith("checksum mismatch"):
                self._set_aside(path)
            self.skipped.append(f"{path.name}: {problem}")
            self._log(f"skipping {path.name}: {problem}; trying an older one")
        return None

    def _set_aside(self, path: Path) -> None:
        """Rename a corrupt checkpoint ``….pt.corrupt`` (its digest file goes)."""
        try:
            os.replace(path, path.with_name(path.name + CORRUPT_SUFFIX))
            digest_path(path).unlink(missing_ok=True)
        except OSError as err:
            self._log(f"cannot set {path.name} aside: {err.strerror or err}")

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
        temp_digest = temp.with_name(temp.name + DIGEST_SUFFIX)
        try:
            with open(temp, "wb") as f:
                hashing = _HashingWriter(f)
                torch = sys.modules.get("torch")
                if torch is not None:
                    torch.save(payload, hashing)
                else:
                    pickle.dump(payload, hashing, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            if self._abort.is_set():
                temp.unlink(missing_ok=True)
                return
            with open(temp_digest, "w", encoding="utf-8") as f:  # the digest is in place before the file
                f.write(f"{hashing.digest.hexdigest()}  {final.name}\n")
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(temp_digest, digest_path(final))
            os.replace(temp, final)
            self._unloadable.discard(final)
            if self.fsync:
                _fsync_dir(self.directory)
            self._written = final
            self.last_write_s = time.perf_counter() - start
            self.prune()
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            self._error = exc
            for path in (temp, temp_digest):
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass

    def prune(self) -> None:
        """Delete all but the newest ``keep`` complete checkpoints (those that failed to load do not count)."""
        loadable = [(step, path) for step, path in self.checkpoints() if path not in self._unloadable]
        for _, path in loadable[: -self.keep]:
            for doomed in (path, digest_path(path)):  # the file first: a digest alone is ignored
                try:
                    doomed.unlink()
                except FileNotFoundError:
                    pass

    def _remove_temp_files(self) -> None:
        """Delete what a killed writer left: temporary files, and digests whose checkpoint never landed."""
        for entry in os.scandir(self.directory):
            orphan = (entry.name.endswith(DIGEST_SUFFIX) and CHECKPOINT_RE.match(entry.name[: -len(DIGEST_SUFFIX)])
                      and not os.path.exists(entry.path[: -len(DIGEST_SUFFIX)]))
            if (entry.name.startswith(TEMP_PREFIX) or orphan) and entry.is_file():
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass


class _HashingWriter:
    """A file's ``write`` that feeds SHA-256 on the way: the digest costs no second read."""

    def __init__(self, file) -> None:
        self._file = file
        self.digest = hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()


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


if __name__ == "__main__":  # a server reads a job's directory as the job's account: python -I -S checkpoint.py DIR
    print(json.dumps(newest_intact(sys.argv[1])._asdict()))
