"""The Python client of ``apportion serve``, and what ``apportion submit/queue/cancel/logs/status`` call.

```python
from apportion import Client

with Client() as server:                       # $APPORTION_SERVER, else http://127.0.0.1:8642
    job = server.submit({"name": "cnn", "command": ["python", "train.py"], "total_steps": 1000})
    done = server.wait(job["id"], timeout=3600)  # the job as it ended
    print(done["status"], server.logs(job["id"])[-200:])
```

The server is ``url``, else ``APPORTION_SERVER``, else http://127.0.0.1:8642. The credential
(when the server asks for one; see :func:`find_credential`) is never needed in code. Every
failure is one :class:`ClientError` whose ``str`` is one line; ``field`` names the job field a
refusal is about. One keep-alive connection of the standard library's ``http.client``: an HTTP
library's import would cost a command-line call more than the call itself.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit

from apportion.serve.accounts.auth import check_secret, read_secret_file

if TYPE_CHECKING:  # the job-file reader (and YAML) load only when a job is submitted
    from apportion.serve.jobs.jobspec import JobSpec

DEFAULT_SERVER = "http://127.0.0.1:8642"
NEXT_PAGE = "X-Next-After-Id"  # GET /jobs's header naming where the next page starts (job_list.NEXT_PAGE)


def credential_file(environ=None) -> Path:
    """The per-user credential file: $XDG_CONFIG_HOME/apportion/token, else ~/.config/apportion/token."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "apportion" / "token"


def find_credential(token: str | None = None, token_file: str | Path | None = None, environ=None) -> str | None:
    """The caller's credential: ``--token``, else ``--token-file``, else ``APPORTION_TOKEN``, else the
    per-user file (which must be 0600); None when there is none. ClientError (one line) for an
    empty or unreadable one."""
    environ = os.environ if environ is None else environ
    try:
        if token is not None:
            return check_secret(token, "--token")
        if token_file is not None:
            return read_secret_file(token_file, f"--token-file {token_file}")
        if "APPORTION_TOKEN" in environ:
            return check_secret(environ["APPORTION_TOKEN"], "APPORTION_TOKEN")
        path = credential_file(environ)
        return read_secret_file(path) if path.exists() else None
    except ValueError as exc:
        raise ClientError(str(exc)) from None


ENDED = ("completed", "failed", "cancelled")  # a job in one of these will not run again
ACTIVE_SHOWN_S = 3600.0  # queue() shows jobs that ended this recently beside the active ones


class ClientError(Exception):
    """What went wrong, in one line (``str(err)``). ``field`` and ``message``: the job field a refusal
    names and what is wrong with it (``field`` None when it names none, ``message`` then the line);
    ``status``: the server's HTTP status (None when no answer came, or nothing was sent); ``retry_after``:
    the seconds a 429 for its user's submit rate asked the client to wait (its Retry-After), else None."""

    def __init__(self, text: str, field: str | None = None, message: str | None = None,
                 status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(text)
        self.field = field
        self.message = message if message is not None else text
        self.status = status
        self.retry_after = retry_after


SUBMIT_WAIT_S = 60.0  # a submit answered 429 (its user's submit rate) is sent again after Retry-After, this long in all


def _seconds(text: str | None) -> float | None:
    """A Retry-After header's seconds (None: none, or a date, which this server never sends)."""
    try:
        return max(0.0, float(text)) if text is not None else None
    except ValueError:
        return None


class Unreachable(ClientError):
    """No answer came: the server could not be reached, or the connection ended before its answer."""


class WaitTimedOut(ClientError, TimeoutError):
    """:meth:`Client.wait` gave up before the job ended; ``job`` is the job as last seen."""

    def __init__(self, text: str, job: dict) -> None:
        super().__init__(text)
        self.job = job


class Client:
    """The API of one apportion server. Use it in a ``with`` block, or call :meth:`close`."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0,
                 token_file: str | Path | None = None) -> None:
        """``url``: the server (default ``APPORTION_SERVER``, else http://127.0.0.1:8642); ``token`` /
        ``token_file``: the credential (default: :func:`find_credential`'s); ``timeout``: seconds a call
        waits for its answer."""
        self.url = (url or os.environ.get("APPORTION_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = find_credential(token, token_file)
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._connection: http.client.HTTPConnection | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        """One keep-alive connection per client."""
        if self._connection is None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ClientError(f"bad server URL {self.url!r}: expected http://HOST:PORT or https://HOST:PORT")
            try:
                port = parts.port
            except ValueError as err:
                raise ClientError(f"bad server URL {self.url!r}: {err}") from None
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            self._connection = kind(parts.hostname, port, timeout=self.timeout)
            self._prefix = parts.path.rstrip("/")
        return self._connection

    def _call(self, method: str, path: str, json_body=None, params: dict | None = None, headers: dict | None = None):
        return self._answer(method, path, json_body, params, headers)[0]

    def _answer(self, method: str, path: str, json_body=None, params: dict | None = None,
                headers: dict | None = None, parse: bool = True) -> tuple[object, object]:
        """(the answer's JSON, its headers); ClientError for a refusal, Unreachable when none came.
        ``parse`` False: a success's body as the bytes it came in (not parsed)."""
        connection = self._connect()
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = {**self._headers, **(headers or {})}
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            status, raw, got = response.status, response.read(), response.headers
        except (OSError, http.client.HTTPException) as err:
            self.close()
            reason = str(err) or type(err).__name__
            raise Unreachable(
                f"cannot reach the apportion server at {self.url} ({reason}); start one with `apportion serve`,"
                " or point --server / APPORTION_SERVER at it"
            ) from None
        if not parse and status < 400:
            return raw, got
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        if status >= 400:
            body = answer if isinstance(answer, dict) else {}
            detail = body.get("detail")
            if not isinstance(detail, str):
                detail = f"HTTP {status} from {self.url}{path}" + (f": {detail}" if detail else "")
            raise ClientError(detail, body.get("field"), body.get("message"), status,
                              _seconds(response.getheader("Retry-After")) if body.get("budget") == "submit_rate" else None)
        if answer is None and raw:
            raise ClientError(f"{self.url}{path} answered something that is not JSON (is it an apportion server?)",
                              status=status)
        return answer, got

    def submit(self, spec: dict | str | Path | JobSpec, user: str | None = None) -> dict:
        """Submit a job: a dict of job-file fields (docs/serve.md, "Job files"; relative paths from
        this process's directory), the path of a job file, or a :class:`JobSpec`. Returns
        ``{"id": "7", "user": "ann"}``. ``user`` (else the spec's) is whose job it is: without a
        credential by default the OS user running this; with one, the credential's (an admin's may
        name another). A field that does not fit is a :class:`ClientError` naming it, before
        anything is sent.

        The submission carries a fresh idempotency key; when no answer comes (the server restarted,
        the connection dropped) it is sent once more with the same key, so a job the server had
        stored is found, not stored twice."""
        spec = job_spec(spec)
        body = spec.to_dict()
        if self._claimed(user or spec.user):
            body["user"] = self._claimed(user or spec.user)
        key = {"Idempotency-Key": uuid.uuid4().hex}
        waited = 0.0
        while True:
            try:
                try:
                    answer = self._call("POST", "/jobs", json_body=body, headers=key)
                except Unreachable:
                    answer = self._call("POST", "/jobs", json_body=body, headers=key)
                break
            except ClientError as err:  # over the user's submit rate: wait as the server asks, a while at most
                if err.retry_after is None or waited + err.retry_after > SUBMIT_WAIT_S:
                    raise
                time.sleep(err.retry_after)
                waited += err.retry_after
        shown = {"id": answer["id"], "user": answer.get("user") or body.get("user")}
        return {**shown, "tasks": answer["tasks"]} if "tasks" in answer else shown

    def _claimed(self, user: str | None) -> str | None:
        """The user a request names: ``user``, else (with no credential, whose user the server knows) the OS user."""
        if user or self.token:
            return user
        from apportion.serve.jobs.jobspec import default_user

        return default_user()

    def jobs(self, status: str | None = None, user: str | None = None, limit: int | None = None,
             ended_after: float | None = None, array: int | str | None = None) -> list[dict]:
        """Every job, by id; or those of these statuses (comma-separated), of this user, of job ``array``,
        that ended after ``ended_after`` (Unix time; active jobs always), the first ``limit``. The server
        sends a page at a time: this asks for each in turn."""
        jobs: list[dict] = []
        for page in self._pages(status, user, limit, ended_after, array):
            jobs.extend(json.loads(page))
        return jobs[:limit] if limit is not None else jobs

    def jobs_text(self, status: str | None = None, user: str | None = None, ended_after: float | None = None,
                  array: int | str | None = None) -> str:
        """:meth:`jobs` as the JSON text the server sent (one job a line), its pages put together
        without parsing them: what ``apportion queue --json`` prints."""
        inner = [text for text in (page.decode().strip()[1:-1].strip() for page in
                                   self._pages(status, user, None, ended_after, array)) if text]
        return "[\n" + ",\n".join(inner) + "\n]" if inner else "[]"

    def _pages(self, status, user, limit, ended_after, array) -> Iterator[bytes]:
        """Each page of ``GET /jobs`` (a JSON list, as bytes) until the last, or until ``limit`` jobs."""
        chosen = {"status": status, "user": user, "ended_after": ended_after, "array": array}
        params = {k: v for k, v in chosen.items() if v is not None}
        seen = 0
        while True:
            left = None if limit is None else limit - seen
            page, headers = self._answer("GET", "/jobs", params={**params, **({"limit": left} if left else {})},
                                         parse=False)
            if not page.strip().startswith(b"["):
                raise ClientError(f"{self.url}/jobs answered something that is not a list of jobs")
            yield page
            following = headers.get(NEXT_PAGE)
            if not following:
                return
            seen += len(json.loads(page)) if limit is not None else 0
            if limit is not None and seen >= limit:
                return
            params["after_id"] = following

    def queue(self, everything: bool = False) -> list[dict]:
        """The jobs ``apportion queue`` lists: those not ended, and those that ended in the last hour
        (``everything``: every job ever submitted); the server leaves out the older ones."""
        if everything:
            return self.jobs()
        now = time.time()
        return recent(self.jobs(ended_after=now - ACTIVE_SHOWN_S), now)

    def job(self, job_id: int | str) -> dict:
        """One job; a :class:`ClientError` with ``status`` 404 when there is none."""
        return self._call("GET", f"/jobs/{_path(job_id)}")

    def cancel(self, job_id: int | str, user: str | None = None) -> dict:
        """Cancel a job (only its user or an admin may): a queued one at once, a running one gets
        SIGTERM; on a job array's id, every task still active. ``user``: who asks (see :meth:`submit`).
        ``{"cancelled": how many jobs}`` (and ``"array": true`` for an array)."""
        user = self._claimed(user)
        return self._call("POST", f"/jobs/{_path(job_id)}/cancel", json_body={"user": user} if user else {})

    def wait(self, job_id: int | str, timeout: float | None = None, poll_s: float = 1.0) -> dict:
        """The job once it has ended (completed, failed or cancelled), asking every ``poll_s``
        seconds; :class:`WaitTimedOut` (a ClientError and a TimeoutError) after ``timeout`` seconds."""
        if not poll_s > 0 or (timeout is not None and not timeout >= 0):
            raise ValueError(f"wait: poll_s must be > 0 and timeout >= 0 or None, got {poll_s!r} and {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] in ENDED:
                return job
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimedOut(f"job {job['id']} had not ended after {timeout:g} s: {job['status']}, "
                                   f"{job['steps_done']}/{job['total_steps']} steps", job)
            time.sleep(poll_s if left is None else min(poll_s, left))

    def logs(self, job_id: int | str, attempt: int | None = None, follow: bool = False) -> str | Iterator[str]:
        """A job's output (stdout and stderr) of its latest attempt, or of ``attempt``, as text. With
        ``follow``: an iterator of chunks as the job writes them, across its attempts (unless
        ``attempt`` is given), that ends when the job ends."""
        chunks = self.log_chunks(job_id, attempt, follow)
        return (text for _, text in chunks) if follow else "".join(text for _, text in chunks)

    def log_chunks(self, job_id: int | str, attempt: int | None = None, follow: bool = False,
                   poll_s: float = 0.5) -> Iterator[tuple[int, str]]:
        """:meth:`logs` as ``(attempt, text)`` chunks, so that a reader can tell the attempts apart."""
        offset, number = 0, attempt
        while True:
            page = self.log_page(job_id, number, offset)
            if page["text"]:
                yield page["attempt"], page["text"]
            number, offset = page["attempt"] or None, page["offset"]
            if page["text"] and not page["done"]:
                continue
            if not follow:
                return
            if page["done"]:
                if attempt is not None:
                    return
                if page["attempts"] > (page["attempt"] or 0):
                    number, offset = (page["attempt"] or 0) + 1, 0
                    continue
                if page["status"] in ENDED:
                    return
            time.sleep(poll_s)

    def log_page(self, job_id: int | str, attempt: int | None = None, offset: int = 0) -> dict:
        """One read of ``GET /jobs/ID/logs``: ``text`` from byte ``offset``, the next ``offset``, whether
        the attempt's log is ``done``, its ``attempt`` number, the job's ``attempts`` and ``status``."""
        params = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self._call("GET", f"/jobs/{_path(job_id)}/logs", params=params)

    def status(self) -> dict:
        """The server: its policy, round, slots and who holds them, jobs by status."""
        return self._call("GET", "/status")

    def blocks(self) -> dict:
        """``GET /blocks``: the privacy policy and each block's budget: unlocked, granted (to jobs not
        started yet), consumed (by jobs that started) and left, in ε."""
        return self._call("GET", "/blocks")

    def add_blocks(self, blocks: list[dict]) -> dict:
        """``POST /blocks`` (admins): add privacy blocks, each ``{"name", "epsilon", "delta"[,
        "rdp_orders"]}``, all or none; ``{"added": [names]}``."""
        return self._call("POST", "/blocks", json_body={"blocks": list(blocks)})

    def history(self, **filters) -> dict:
        """``GET /history``: the jobs ``filters`` choose (user, queue, state, since, until, by, limit;
        None: not given) with their accounting and totals."""
        return self._call("GET", "/history", params={k: v for k, v in filters.items() if v is not None})


def recent(jobs, now: float) -> list[dict]:
    """The ``jobs`` not ended, and those that ended less than ``ACTIVE_SHOWN_S`` before ``now``."""
    return [j for j in jobs if j["status"] not in ENDED or j["finished"] is None
            or now - j["finished"] < ACTIVE_SHOWN_S]


def job_spec(spec: dict | str | Path | JobSpec) -> JobSpec:
    """``spec`` as a checked :class:`JobSpec`: a ClientError naming the field (and the file's line)
    of anything that does not fit."""
    from apportion.core.errors import InputError
    from apportion.serve.jobs.jobspec import JobSpec, load_job_file, spec_from_fields

    try:
        if isinstance(spec, JobSpec):
            return spec
        if isinstance(spec, (str, os.PathLike)):
            return load_job_file(spec)
        if isinstance(spec, dict):
            return spec_from_fields(spec, "job")
    except InputError as err:
        raise ClientError(str(err), err.field, err.message) from None
    raise ClientError(f"a job is a dict of job-file fields, the path of a job file or a JobSpec, "
                      f"got {type(spec).__name__}")


def _path(job_id: int | str) -> str:
    """A job id as one segment of a URL path, whatever it holds."""
    return quote(str(job_id), safe="")
