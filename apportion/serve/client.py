"""The client side of the API, for ``apportion submit/queue/cancel/logs/status``.

The server is ``--server URL``, else ``APPORTION_SERVER``, else http://127.0.0.1:8642; the
token (when the server wants one) ``--token``, else ``APPORTION_TOKEN``. Every failure is one
:class:`ClientError` line.
"""

from __future__ import annotations

import os

import httpx

from apportion.serve.jobspec import JobSpec

DEFAULT_SERVER = "http://127.0.0.1:8642"


class ClientError(Exception):
    """One line; ``field`` and ``message`` when the server rejected a field of a job spec."""

    def __init__(self, text: str, field: str | None = None, message: str | None = None) -> None:
        super().__init__(text)
        self.field = field
        self.message = message


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("APPORTION_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("APPORTION_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
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

    def submit(self, spec: JobSpec, user: str) -> str:
        body = spec.to_dict()
        body["user"] = spec.user or user
        return self._call("POST", "/jobs", json=body)["id"]

    def jobs(self) -> list[dict]:
        return self._call("GET", "/jobs")

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: str, user: str) -> None:
        self._call("POST", f"/jobs/{job_id}/cancel", json={"user": user})

    def logs(self, job_id: str, attempt: int | None = None, offset: int = 0) -> dict:
        params = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self._call("GET", f"/jobs/{job_id}/logs", params=params)

    def status(self) -> dict:
        return self._call("GET", "/status")
