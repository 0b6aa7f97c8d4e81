"""A small HTTP client for the two calls a job attempt makes: lease renewal and progress.

Connection errors, timeouts and 5xx answers are retried with exponential backoff until a
deadline, then reported as :class:`ServerUnreachable`; the caller keeps training and asks
again at its next check, so a server restart never costs a job its work. A ``409`` means
the attempt is stale (the server has moved on to a newer one): :class:`StaleAttempt`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import httpx


class ServerError(RuntimeError):
    """The server gave no usable answer (unreachable, or an unexpected status)."""


class ServerUnreachable(ServerError):
    """No answer before the deadline: connection refused, timeouts or 5xx answers."""


class StaleAttempt(RuntimeError):
    """The server answered 409: this attempt is not the job's current one; exit at once."""


@dataclass(frozen=True)
class LeaseAnswer:
    renew: bool
    lease_end: float | None = None


_RETRY_STATUS = {500, 502, 503, 504}
MAX_SKIPPED, MAX_SKIPPED_CHARS = 16, 300  # what a lease call's skipped_checkpoints may hold (the server's bounds)


class LeaseClient:
    def __init__(
        self,
        server: str,
        job_id: str,
        attempt: int,
        token: str | None = None,
        *,
        timeout_s: float = 3.0,
        connect_timeout_s: float = 1.0,
        deadline_s: float = 4.0,
        backoff_s: float = 0.1,
        max_backoff_s: float = 0.5,  # a server back from a restart is heard within half a second
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.deadline_s = deadline_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=server.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            transport=transport,
        )

    def lease(self, steps_done: int, *, deadline_s: float | None = None, skipped: tuple[str, ...] = ()) -> LeaseAnswer:
        """Ask whether this attempt keeps its GPUs past the current lease; ``skipped``: the newer
        checkpoints its restore passed over ("step-XXXXXXXX.pt: why"), said at its first call."""
        request = {"attempt": self.attempt, "steps_done": int(steps_done)}
        if skipped:
            request["skipped_checkpoints"] = [str(line)[:MAX_SKIPPED_CHARS] for line in skipped[:MAX_SKIPPED]]
        body = self._post(
            f"/jobs/{self.job_id}/lease",
            request,
            self.deadline_s if deadline_s is None else deadline_s,
        )
        if not isinstance(body, dict) or "renew" not in body:
            raise ServerError(f"lease answer without 'renew': {body!r}")
        if not body["renew"]:
            return LeaseAnswer(renew=False)
        end = body.get("lease_end")
        return LeaseAnswer(renew=True, lease_end=float(end) if end is not None else None)

    def progress(
        self, steps_done: int, steps_per_s: float, *, deadline_s: float | None = None, **measured: float
    ) -> None:
        """Report steps done and steps/s; ``measured``: what an elastic job adds (noise_scale, sync_s,
        micro_batch, micro_batches, nodes), finite values only."""
        body = {"attempt": self.attempt, "steps_done": int(steps_done), "steps_per_s": float(steps_per_s)}
        body.update({k: float(v) for k, v in measured.items() if v is not None and math.isfinite(float(v))})
        self._post(f"/jobs/{self.job_id}/progress", body, self.deadline_s if deadline_s is None else deadline_s)

    def _post(self, path: str, payload: dict, deadline_s: float):
        start = time.monotonic()
        delay = self.backoff_s
        last = "no attempt made"
        while True:
            remaining = deadline_s - (time.monotonic() - start)
            timeout = httpx.Timeout(
                max(0.05, min(self._timeout_s, remaining)),
                connect=max(0.05, min(self._connect_timeout_s, remaining)),
            )
            try:
                answer = self._http.post(path, json=payload, timeout=timeout)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code == 409:
                    raise StaleAttempt(f"attempt {self.attempt} of job {self.job_id} is stale: {answer.text}")
                if answer.status_code in _RETRY_STATUS:
                    last = f"HTTP {answer.status_code}"
                elif answer.is_success:
                    try:
                        return answer.json() if answer.content else {}
                    except ValueError:
                        raise ServerError(f"POST {path}: answer is not JSON: {answer.text[:200]!r}") from None
                else:
                    raise ServerError(f"POST {path}: HTTP {answer.status_code}: {answer.text[:200]}")
            remaining = deadline_s - (time.monotonic() - start)
            if remaining <= 0:
                raise ServerUnreachable(f"POST {path}: no answer within {deadline_s:.1f}s ({last})")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, self.max_backoff_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LeaseClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
