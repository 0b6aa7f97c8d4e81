"""Which OS account a job's command runs as (``apportion serve --run-as``).

- ``server-user`` (the default when the server is not root): as the server's own OS user.
  The jobs of every apportion user can then read each other's files and signal each other's
  processes; fine for one person, or a team that shares one account anyway.
- ``mapped`` (``--user-map FILE``, root only, credentials required): as the OS account the
  job's apportion user maps to. The wrapper that supervises the attempt stays root (it writes
  the exit record and kills the process group); only the job's command drops to the account,
  with its groups, ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL``, and enters its workdir only then.
  The job's environment starts clean (those, ``--job-path``, its ``env``, apportion's variables:
  never the server's). The wrapper runs in the server's own environment: the job's applies only
  once its processes are the account (apportion/executors/local/wrapper.py). A user's paths are
  looked at only as the account (executors/local/as_account.py). A map naming root or a missing
  account does not start (``mapped_accounts``); what would fail every job of an account, or open
  its home to others, is warned of at start (``start_warnings``).
- ``refuse`` (the default when the server is root): a server running as root does not start,
  rather than run every job as root. As any other user it changes nothing.
"""

from __future__ import annotations

import json
import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("server-user", "mapped", "refuse")
DEFAULT_JOB_PATH = "/usr/local/bin:/usr/bin:/bin"  # settings.py's job_path default


class NoAccount(LookupError):
    """The job's user maps to no usable OS account (one line)."""


@dataclass(frozen=True)
class Account:
    """An OS account a job runs as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    home: str = "/"
    shell: str = "/bin/sh"

    def environ(self) -> dict[str, str]:
        """What a login as this account would set (the job's environment starts from this, never the server's)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}

    def identity(self):
        """``(uid, gid, groups)``, what a process becomes to act as this account (executors/local/as_account.py)."""
        from apportion.executors.local.as_account import Identity

        return Identity.of(self.uid, self.gid, self.groups)

    def argument(self) -> str:
        """``UID:GID:G1,G2``, for the wrapper's ``--run-as``."""
        return f"{self.uid}:{self.gid}:{','.join(str(g) for g in self.groups)}"

    @classmethod
    def from_argument(cls, text: str) -> Account:
        uid, gid, groups = text.split(":")
        return cls(name=uid, uid=int(uid), gid=int(gid), groups=tuple(int(g) for g in groups.split(",") if g))


@dataclass(frozen=True)
class RunAs:
    """The chosen mode, and for ``mapped`` the apportion user → OS account names."""

    mode: str = "server-user"
    mapping: dict[str, str] = field(default_factory=dict)
    job_path: str = DEFAULT_JOB_PATH  # mapped: the PATH a job's clean environment has (--job-path)

    def clean_environment(self, account: Account) -> dict[str, str]:
        """What a job of ``account`` starts with under ``mapped``, before its own ``env`` and apportion's
        variables: the account's login variables and the operator's PATH, nothing of the server's
        (root's ``VIRTUAL_ENV``, ``PIP_*``, ``PYENV_ROOT``... never reach another account's job)."""
        return {**account.environ(), "PATH": self.job_path, "PYTHONUNBUFFERED": "1"}

    def account(self, user: str) -> Account | None:
        """The account ``user``'s jobs run as; None: the server's own. NoAccount when unmapped."""
        if self.mode != "mapped":
            return None
        name = self.mapping.get(user)
        if name is None:
            raise NoAccount(f"user {user!r} has no OS account in this server's --user-map, so its jobs cannot run")
        return lookup(name, user)


def lookup(name: str, user: str) -> Account:
    """The OS account ``name`` (mapped from apportion user ``user``); NoAccount for a missing or root one."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise NoAccount(f"user {user!r} maps to OS account {name!r}, which does not exist on this machine") from None
    if entry.pw_uid == 0:
        raise NoAccount(f"user {user!r} maps to OS account {name!r}, which is root: jobs never run as root")
    return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid,
                   groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)), home=entry.pw_dir,
                   shell=entry.pw_shell or "/bin/sh")


def load_user_map(path: str | Path) -> dict[str, str]:
    """``{apportion user: OS account}`` from a YAML or JSON mapping; ValueError naming the file,
    also when another account may change it (it decides which account runs whose jobs)."""
    from apportion.serve.base.trusted_file import trust_problem

    path = Path(path).expanduser()
    try:
        with open(path, encoding="utf-8") as handle:
            problem = trust_problem(os.fstat(handle.fileno()), path, secret=False)
            text = "" if problem else handle.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--user-map {path}: {getattr(err, 'strerror', None) or err}") from None
    if problem:
        raise ValueError(f"--user-map {path}: {problem}")
    if path.suffix == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except ValueError as err:  # json.JSONDecodeError, a user given twice
            raise ValueError(f"--user-map {path}: not valid JSON: {str(err).splitlines()[0]}") from None
    else:
        from apportion.core.errors import InputError
        from apportion.workloads.yaml_file import parse_yaml

        try:
            data, _ = parse_yaml(text, f"--user-map {path}")  # YAML 1.2, as a job file; a user given twice is an error
        except InputError as err:
            raise ValueError(str(err)) from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"--user-map {path}: must map apportion users to OS accounts, e.g. 'alice: alice'")
    mapping = {}
    for user, account in data.items():
        if not isinstance(user, str) or not isinstance(account, str) or not account.strip():
            raise ValueError(f"--user-map {path}: {user!r}: the OS account must be a name, got {account!r}")
        mapping[user] = account.strip()
    return mapping


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refusing a key given twice (the last one would silently win)."""
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


def choose(mode: str | None, euid: int, user_map: dict[str, str] | None = None,
           job_path: str = DEFAULT_JOB_PATH) -> RunAs:
    """The run-as setting a server with effective uid ``euid`` uses; ValueError (one line) when it must not start."""
    if mode is None:
        mode = "refuse" if euid == 0 else "server-user"
    if mode not in MODES:
        raise ValueError(f"--run-as must be one of {', '.join(MODES)}, got {mode!r}")
    if user_map is not None and mode != "mapped":
        raise ValueError("--user-map is for --run-as mapped")
    if mode == "refuse":
        if euid == 0:
            raise ValueError("apportion serve is running as root, and would run every job as root: give "
                             "--run-as mapped --user-map FILE (each user's jobs as their OS account) or "
                             "--run-as server-user (accept root jobs)")
        return RunAs("server-user")
    if mode == "mapped":
        if user_map is None:
            raise ValueError("--run-as mapped needs --user-map FILE (apportion user: OS account)")
        if euid != 0:
            raise ValueError("--run-as mapped starts jobs as other OS accounts, which needs a server running as root")
        return RunAs("mapped", dict(user_map), job_path)
    return RunAs("server-user")


def prepare_job_dirs(account: Account, state_dir: Path, job_id: int, checkpoint_dir: str) -> None:
    """Let a job running as ``account`` reach its directory (STATE_DIR/jobs/ID, where its command
    runs when the job file names no workdir) and own its default checkpoint directory in it.

    The directories down to STATE_DIR/jobs/ID become traversable but not listable (0711); logs
    and the state file in them stay the server's (0600). The default checkpoint directory is
    the account's own (0700). A checkpoint directory the job file names is the job's to create,
    as its own account: the server never creates it as root.
    """
    jobs = Path(state_dir) / "jobs"
    job_dir = jobs / str(job_id)
    job_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
    for directory in (Path(state_dir), jobs, job_dir):
        os.chmod(directory, 0o711)
    path = Path(checkpoint_dir)
    if path == job_dir / "checkpoints":
        path.mkdir(exist_ok=True, mode=0o700)
        os.chown(path, account.uid, account.gid)


def mapped_accounts(run_as: RunAs) -> dict[str, Account]:
    """Each mapped user's OS account, checked when the server starts (not at a user's first submit):
    ValueError naming the first user whose account does not exist or is root."""
    accounts = {}
    for user, name in run_as.mapping.items():
        try:
            accounts[user] = lookup(name, user)
        except NoAccount as err:
            raise ValueError(f"--user-map: {err}; map that user to another account, or remove it") from None
    return accounts


def start_warnings(run_as: RunAs, state_dir: Path, python: str) -> list[str]:
    """What would fail every job of an account, or weaken the isolation ``mapped`` promises, in lines
    for the server's log at start: an account that can run no ``python`` on ``--job-path`` (or not
    this server's ``python``, which warm starts fork), a home others may enter or read, a state
    directory others may read. Each is looked at as the account (as_account.py)."""
    from apportion.executors.local.as_account import answer_as, cannot_run

    warnings = []
    accounts = {a.name: a for a in mapped_accounts(run_as).values()}
    for name, account in sorted(accounts.items()):
        def runs() -> str:
            found = [cannot_run(program, run_as.job_path) for program in ("python3", "python")]
            return "" if "" in found else "; ".join(found)

        try:
            why = answer_as(account.identity(), runs)
        except ValueError as err:
            why = f"cannot check it: {err}"
        if why:
            warnings.append(f"OS account {name} can run no python on --job-path {run_as.job_path} ({why}): every"
                            " job of its users that runs python will fail; set --job-path to where it may run one")
        try:
            mine = answer_as(account.identity(), lambda: cannot_run(python, ""))
        except ValueError as err:
            mine = f"cannot check it: {err}"
        if mine:
            warnings.append(f"OS account {name} cannot run this server's Python ({mine}): its jobs never start"
                            " warm, and those that run it fail")
        try:
            mode = os.stat(account.home).st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            warnings.append(f"the home of OS account {name}, {account.home}, is {mode:04o}: other accounts' jobs can"
                            f" reach what it holds; make it 0700 (chmod 700 {account.home})")
    try:
        mode = os.stat(state_dir).st_mode & 0o777
    except OSError:
        return warnings
    if mode & 0o066:
        warnings.append(f"the state directory {state_dir} is {mode:04o}: others can read or change it; it should be"
                        " 0711 (chmod 711)")
    return warnings
