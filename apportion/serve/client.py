"""The client side of the API, for ``apportion submit/queue/cancel/logs/status``.

The server is ``--server URL``, else ``APPORTION_SERVER``, else http://127.0.0.1:8642. The
credential (when the server asks for one; see :func:`find_credential`) is never needed on the
command line. Every failure is one :class:`ClientError` line.
"""

from __future__ import annotations

import http.client
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from apportion.serve.auth import check_secret, read_secret_file

if TYPE_CHECKING:  # the job-file reader (and YAML) load only for `apportion submit`
    from apportion.serve.jobspec import JobSpec

DEFAULT_SERVER = "http://127.0.0.1:8642"


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


class ClientError(Exception):
    """One line; ``field`` and ``message`` when the server rejected a field of a job spec."""

    def __init__(self, text: str, field: str | None = None, message: str | None = None) -> None:
        super().__init__(text)
        self.field = field
        self.message = message


class Unreachable(ClientError):
    """No answer came: the server could not be reached, or the connection ended before its answer."""


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0,
                 token_file: str | Path | None = None) -> None:
        """``token``/``token_file``: the credential (default: :func:`find_credential`'s)."""
        self.url = (url or os.environ.get("APPORTION_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = find_credential(token, token_file)
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        """One keep-alive connection per client; the standard library's, so that a CLI call
        starts fast (an HTTP library's import costs more than the call)."""
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
            status, raw = response.status, response.read()
        except (OSError, http.client.HTTPException) as err:
            self.close()
            reason = str(err) or type(err).__name__
            raise Unreachable(
                f"cannot reach the apportion server at {self.url} ({reason}); start one with `apportion serve`,"
                " or point --server / APPORTION_SERVER at it"
            ) from None
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        if status >= 400:
            body = answer if isinstance(answer, dict) else {}
            detail = body.get("detail")
            if not isinstance(detail, str):
                detail = f"HTTP {status} from {self.url}{path}" + (f": {detail}" if detail else "")
            raise ClientError(detail, body.get("field"), body.get("message"))
        if answer is None and raw:
            raise ClientError(f"{self.url}{path} answered something that is not JSON (is it an apportion server?)")
        return answer

    def submit(self, spec: JobSpec, user: str | None) -> dict:
        """Submit ``spec``; ``{"id", "user"}``: with a credential the server says whose job it is.

        The submission carries a fresh idempotency key; when no answer comes (the server restarted,
        the connection dropped) it is sent once more with the same key, so a job the server had
        stored is found, not stored twice."""
        body = spec.to_dict()
        if user or spec.user:
            body["user"] = user or spec.user
        key = {"Idempotency-Key": uuid.uuid4().hex}
        try:
            answer = self._call("POST", "/jobs", json_body=body, headers=key)
        except Unreachable:
            answer = self._call("POST", "/jobs", json_body=body, headers=key)
        return {"id": answer["id"], "user": answer.get("user") or body.get("user")}

    def jobs(self, status: str | None = None, user: str | None = None, limit: int | None = None,
             ended_after: float | None = None) -> list[dict]:
        """Every job, by id; or those of these statuses (comma-separated), of this user, that ended after
        ``ended_after`` (Unix time; active jobs always), the first ``limit``."""
        chosen = {"status": status, "user": user, "limit": limit, "ended_after": ended_after}
        return self._call("GET", "/jobs", params={k: v for k, v in chosen.items() if v is not None} or None)

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: str, user: str | None) -> None:
        self._call("POST", f"/jobs/{job_id}/cancel", json_body={"user": user} if user else {})

    def logs(self, job_id: str, attempt: int | None = None, offset: int = 0) -> dict:
        params = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self._call("GET", f"/jobs/{job_id}/logs", params=params)

    def status(self) -> dict:
        return self._call("GET", "/status")
