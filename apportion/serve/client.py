"""The client side of the API, for ``apportion submit/queue/cancel/logs/status``.

The server is ``--server URL``, else ``APPORTION_SERVER``, else http://127.0.0.1:8642. The
credential (when the server asks for one; see :func:`find_credential`) is never needed on the
command line. Every failure is one :class:`ClientError` line.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from apportion.serve.auth import check_secret, read_secret_file
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


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0,
                 token_file: str | Path | None = None) -> None:
        """``token``/``token_file``: the credential (default: :func:`find_credential`'s)."""
        self.url = (url or os.environ.get("APPORTION_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = find_credential(token, token_file)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs):
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.InvalidURL as err:
            raise ClientError(f"bad server URL {self.url!r}: {err}") from None
        except httpx.TransportError as err:
            reason = str(err) or type(err).__name__
            raise ClientError(
                f"cannot reach the apportion server at {self.url} ({reason}); start one with `apportion serve`,"
                " or point --server / APPORTION_SERVER at it"
            ) from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {}
            detail = body.get("detail") if isinstance(body, dict) else None
            if not isinstance(detail, str):
                detail = f"HTTP {response.status_code} from {self.url}{path}" + (f": {detail}" if detail else "")
            raise ClientError(detail, body.get("field"), body.get("message"))
        return response.json()

    def submit(self, spec: JobSpec, user: str | None) -> dict:
        """Submit ``spec``; ``{"id", "user"}``: with a credential the server says whose job it is."""
        body = spec.to_dict()
        if user or spec.user:
            body["user"] = user or spec.user
        answer = self._call("POST", "/jobs", json=body)
        return {"id": answer["id"], "user": answer.get("user") or body.get("user")}

    def jobs(self) -> list[dict]:
        return self._call("GET", "/jobs")

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: str, user: str | None) -> None:
        self._call("POST", f"/jobs/{job_id}/cancel", json={"user": user} if user else {})

    def logs(self, job_id: str, attempt: int | None = None, offset: int = 0) -> dict:
        params = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self._call("GET", f"/jobs/{job_id}/logs", params=params)

    def status(self) -> dict:
        return self._call("GET", "/status")
