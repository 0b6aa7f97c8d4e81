"""Warm starts: a job's Python process forked from a wrapper that has already imported torch.

A job's ``python script.py ARGS`` or ``python -m module ARGS`` (an argument list, or a shell
line that is exactly that) spends seconds importing torch (and ``torch._dynamo``, which
``torch.optim`` pulls in) before its first step. A *spare* wrapper (spare_pool.py) does those
imports before any job is assigned to it; when the executor hands it an attempt, it forks the
job's process instead of exec'ing Python, and the fork makes itself what the exec would have
made: the job's environment, working directory, OS account, signal dispositions, open files
(0, 1 and 2 only), ``sys.argv``, ``sys.path[0]`` and a fresh ``__main__`` (runpy), the torch
and OpenBLAS thread counts its environment asks for, and the same exit code (``SystemExit``,
an uncaught exception's traceback and exit 1, a signal). The fork drops to the job's OS account
(``--run-as``) first, and takes the job's environment only then: the spare itself never has it.

Everything that cannot be made the same falls back to a cold start (``refusal`` says why):
another interpreter, interpreter options, a variable read at start-up or import
(``PYTHON*``, locale, ``LD_*``, OpenMP/MKL/OpenBLAS tuning, ``TORCH*``…) that differs from the
spare's, a relative ``PYTHONPATH`` entry, a module in the script's directory that would shadow
one the spare imported, more threads than torch would use by default, and above all a spare
that is not single-threaded or has initialised CUDA: it never forks then.

Standard library only at import: the cold wrapper imports this module too.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys

PRELOAD = ("torch", "torch._dynamo", "torch.optim", "apportion.runtime")
# environment variables read when Python starts or a preloaded library is imported: a job whose
# value differs from the spare's starts cold
STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG", "LD_", "TORCH", "PYTORCH", "OMP_", "KMP_", "GOMP_", "MKL_",
                    "OPENBLAS_", "GOTO_", "NUMPY_", "CUDA_", "MALLOC_", "TZ")
# ... except these, which the fork applies itself (or which are read only later)
APPLIED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
SPARE_UNSET = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the spare's torch reads the default thread count
_PLAIN_LINE = re.compile(r"[A-Za-z0-9_./:,+@%-]+( +[A-Za-z0-9_./:,=+@%-]+)*")  # no quoting, expansion or operators
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SOURCE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pyw")


def spare_environment(server_env: dict[str, str]) -> dict[str, str]:
    """A wrapper's own environment, a spare's or a cold one's: the server's, less the per-attempt part
    (what every job's starts from, apportion.serve.attempts.lifecycle); never anything of a job's."""
    env = {k: v for k, v in server_env.items()
           if not k.startswith("APPORTION_") and k != "CUDA_VISIBLE_DEVICES" and k not in SPARE_UNSET}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def python_command(command: str | list[str]) -> list[str] | None:
    """The argument list of a command that is ``python …`` with no shell in between, else None."""
    if isinstance(command, str):
        line = command.strip()
        if not _PLAIN_LINE.fullmatch(line) or "=" in line.split(" ")[0]:
            return None
        return line.split()
    return list(command) if command else None


def target(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """``("script", PATH, ARGS)`` or ``("module", NAME, ARGS)`` for ``python PATH ARGS`` / ``python -m NAME ARGS``."""
    if len(argv) >= 3 and argv[1] == "-m" and _MODULE.fullmatch(argv[2]):
        return "module", argv[2], argv[3:]
    if len(argv) >= 2 and argv[1] and not argv[1].startswith("-"):
        return "script", argv[1], argv[2:]
    return None


def same_interpreter(program: str, env: dict[str, str], python: str) -> bool:
    """Does ``program`` (looked up on the job's PATH) start ``python``, in the same environment?

    The same file in the same directory: a virtual environment is found next to the
    executable, so a symlink elsewhere to the same binary is another Python."""
    found = program if "/" in program else shutil.which(program, path=env.get("PATH", os.defpath))
    if not found:
        return False
    found, python = os.path.abspath(found), os.path.abspath(python)
    if found == python:
        return True
    try:
        return os.path.dirname(found) == os.path.dirname(python) and os.path.samefile(found, python)
    except OSError:
        return False


def refusal(command: str | list[str], env: dict[str, str], spare_env: dict[str, str], python: str,
            workdir: str | None) -> str | None:
    """Why this command cannot start warm in a spare with ``spare_env`` (None: it can): the static checks."""
    argv = python_command(command)
    if argv is None:
        return "not a plain command (a shell line with quoting, expansion or operators)"
    if target(argv) is None:
        return "not `python SCRIPT ARGS` or `python -m MODULE ARGS`"
    if not same_interpreter(argv[0], env, python):
        return f"{argv[0]} is not this server's Python ({python})"
    kind, name, _ = target(argv)
    if kind == "script" and not os.path.isfile(os.path.join(workdir or ".", name)):
        return f"no script file {name}"
    for key in sorted(set(env) | set(spare_env)):
        if key.startswith(STARTUP_PREFIXES) and key not in APPLIED and env.get(key) != spare_env.get(key):
            return f"{key} differs from the warm process's (read at start-up)"
    if any(p and not os.path.isabs(p) for p in env.get("PYTHONPATH", "").split(os.pathsep)):
        return "PYTHONPATH has a relative entry"
    return None


def preload() -> str | None:
    """Import what a job would (in a spare, before any job is assigned); None when it can fork, else why not."""
    blas_default = "OPENBLAS_NUM_THREADS" not in os.environ
    if blas_default:  # numpy's OpenBLAS would start its worker threads now; the fork starts the job's own
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import importlib

        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    finally:
        if blas_default:
            del os.environ["OPENBLAS_NUM_THREADS"]
    return unfit()


def unfit() -> str | None:
    """Why this process must not fork a job now (threads, CUDA), or None."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return "cannot count this process's threads (/proc/self/task)"
    if threads != 1:
        return f"the warm process runs {threads} threads after its imports"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in the warm process"
    return None


def _positive(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() and int(value) > 0 else None


def thread_settings(env: dict[str, str], spare_env: dict[str, str]) -> tuple[dict[str, int], str | None]:
    """The thread counts the fork must set (``torch``, ``openblas``) for the job's environment, or why it cannot."""
    settings: dict[str, int] = {}
    torch = sys.modules.get("torch")
    asked = [(k, env[k]) for k in ("MKL_NUM_THREADS", "OMP_NUM_THREADS") if env.get(k) is not None]
    if torch is not None and asked:
        name, value = asked[0]  # torch reads MKL_NUM_THREADS first
        count = _positive(value)
        default = torch.get_num_threads()  # what the spare's torch chose with neither variable set
        if count is None or count > default:
            return {}, f"{name}={value} is not a thread count from 1 to torch's default here ({default})"
        if count != default:
            settings["torch"] = count
    if "numpy" in sys.modules and "OPENBLAS_NUM_THREADS" in spare_env:  # the spare's OpenBLAS took that count
        if env.get("OPENBLAS_NUM_THREADS") != spare_env["OPENBLAS_NUM_THREADS"]:
            return {}, "OPENBLAS_NUM_THREADS differs from the warm process's (read at import)"
    elif "numpy" in sys.modules:
        blas = next((env[k] for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS") if k in env), None)
        count = _positive(blas) if blas is not None else len(os.sched_getaffinity(0))
        if count is None:
            return {}, f"OpenBLAS's thread count from {blas!r}"
        if count != 1:
            if _openblas_setter() is None:
                return {}, "OpenBLAS's thread count cannot be set after its import"
            settings["openblas"] = min(count, 64)
    return settings, None


def _openblas_setter():
    """numpy's OpenBLAS ``set_num_threads``, found among this process's libraries, or None."""
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            libraries = sorted({line.split()[-1] for line in maps if "openblas" in line and ".so" in line})
    except OSError:
        return None
    for path in libraries:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads"):
            if hasattr(library, name):
                return getattr(library, name)
    return None


def shadowed(path0: str) -> str | None:
    """A module the spare imported that ``path0`` (the job's ``sys.path[0]``) would shadow, or None."""
    try:
        entries = os.listdir(path0)
    except OSError:
        return None
    for entry in entries:
        name = entry.split(".")[0] if entry.endswith(_SOURCE_SUFFIXES) else entry if "." not in entry else None
        module = sys.modules.get(name) if name else None
        if module is None:
            continue
        origin = getattr(module, "__file__", None) or ""
        if not os.path.realpath(origin).startswith(os.path.realpath(path0) + os.sep):
            return f"{os.path.join(path0, entry)} would shadow the module {name} the warm process imported"
    return None


def _as(run_as: str | None, check) -> str | None:
    """``check()``'s refusal, looked for as the job's account (``--run-as``): never as root, whose
    answer would tell of files in a directory the account may not look at."""
    if not run_as:
        return check()
    from apportion.executors.local.as_account import Identity, answer_as

    try:
        return answer_as(Identity.parse(run_as), lambda: check() or "") or None
    except ValueError as err:
        return f"cannot look at the job's files as its account: {err}"


class CannotStart(OSError):
    """The job's account cannot enter its workdir or run its interpreter: the fork's exit 126 and its
    line, as a cold start's (wrapper.py)."""


class Launch:
    """One warm launch, decided in the wrapper before it forks: ``refusal`` is why it cannot (then it starts cold)."""

    def __init__(self, command: list[str], env: dict[str, str], spare_env: dict[str, str], workdir: str | None,
                 run_as: str | None = None) -> None:
        self.command, self.env, self.workdir = command, env, workdir
        self.refusal = _as(run_as, lambda: refusal(command, env, spare_env, sys.executable, workdir))
        if self.refusal:
            return
        self.kind, self.name, self.args = target(python_command(command))
        base = os.path.abspath(workdir or ".")
        self.path0 = base if self.kind == "module" else os.path.dirname(os.path.realpath(os.path.join(base, self.name)))
        self.threads, why = thread_settings(env, spare_env)
        self.refusal = why or _as(run_as, lambda: shadowed(self.path0)) or unfit()  # last: the checks above start no threads

    def fork(self, run_as: str | None) -> int:
        """Fork the job's process; in the child, become it and never return."""
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        try:
            self._become(run_as)
        except CannotStart as err:  # as the cold start's: exit 126, never worth a retry
            try:
                print(f"apportion: {err}", file=sys.stderr, flush=True)
            finally:
                os._exit(126)
        except BaseException as err:  # the exec would have failed: as the wrapper's cannot-start
            try:
                print(f"apportion: cannot start {self.command[0]}: {err}", file=sys.stderr, flush=True)
            finally:
                os._exit(127)
        os._exit(_run_main(self.kind, self.name, self.args))

    def _become(self, run_as: str | None) -> None:
        """What exec would have done: signals, files, directory, account, environment, threads, argv, path.

        The job's environment is applied only once this process is the job's account; the kernel
        made it non-dumpable at that switch, and it stays so (it holds the spare's memory)."""
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
        if run_as:  # the account first: the directory is entered, and every file opened, as the account
            from apportion.executors.local.as_account import Identity, become

            become(Identity.parse(run_as))
        if self.workdir:
            try:
                os.chdir(self.workdir)
            except OSError as err:
                raise CannotStart(f"cannot start: cannot enter the workdir {self.workdir}: {err.strerror}"
                                  + (f" (as uid {os.getuid()})" if run_as else "")) from None
        if not os.access(sys.executable, os.X_OK):  # the exec would have failed: the account may not run it
            from apportion.executors.local.as_account import cannot_run

            why = cannot_run(self.command[0], self.env.get("PATH", os.defpath)) or os.strerror(errno.EACCES)
            raise CannotStart(f"cannot start {self.command[0]}: {why}" + (f" (as uid {os.getuid()})" if run_as else ""))
        os.environ.clear()
        os.environ.update(self.env)
        import tempfile

        tempfile.tempdir = None  # found again from this environment's TMPDIR
        if "torch" in self.threads:
            sys.modules["torch"].set_num_threads(self.threads["torch"])
        if "openblas" in self.threads:
            _openblas_setter()(self.threads["openblas"])
        numpy = sys.modules.get("numpy")
        if numpy is not None:  # a new process draws a new global seed; the fork must not share the spare's
            numpy.random.seed()
        sys.argv = [self.name, *self.args]
        sys.path.insert(0, self.path0)


def _run_main(kind: str, name: str, args: list[str]) -> int:
    """Run the job as ``__main__`` and end as the interpreter would: its exit code (a signal: it kills itself)."""
    import atexit
    import builtins
    import importlib.machinery
    import io
    import runpy
    import threading
    import types

    code, interrupted = 0, False
    main = types.ModuleType("__main__")  # a fresh __main__, as the interpreter's (not the spare's)
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    try:
        if kind == "module":  # what `python -m` runs
            runpy._run_module_as_main(name, alter_argv=True)
        else:  # what `python SCRIPT` runs: __file__ absolute, sys.argv[0] as given
            path = os.path.abspath(name)
            main.__dict__.update(__file__=path, __cached__=None,
                                 __loader__=importlib.machinery.SourceFileLoader("__main__", path))
            try:
                with io.open_code(path) as source:
                    text = source.read()
            except OSError as err:  # as the interpreter says it, exit 2
                print(f"{sys.executable}: can't open file {path!r}: [Errno {err.errno}] {err.strerror}",
                      file=sys.stderr, flush=True)
                return 2
            exec(compile(text, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exit_:
        code = _exit_status(exit_.code)
    except BaseException as err:  # an uncaught exception: its traceback from the job's own frames, exit 1
        interrupted = isinstance(err, KeyboardInterrupt)
        tb = err.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename == __file__
                                  or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
            tb = tb.tb_next
        err.__traceback__ = tb  # the hook prints the exception's own traceback
        sys.excepthook(type(err), err, tb)
        code = 1
    try:  # the interpreter's finalisation: non-daemon threads, atexit, the standard streams
        threading._shutdown()
    except BaseException:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    if interrupted:  # as CPython: exit by SIGINT so that the parent sees the interrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_status(value: object) -> int:
    """The exit status ``raise SystemExit(value)`` gives (a message goes to stderr, status 1)."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value & 0xFF
    if isinstance(value, bool):
        return int(value)
    print(value, file=sys.stderr, flush=True)
    return 1
