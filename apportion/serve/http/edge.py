"""What the server refuses before a request reaches the API: a body over its limit (413) and a
client over its limit of wrong credentials (429), each answered before anything is read or
looked up, as JSON ``{"detail": ...}`` like every other error; and a method the path does not
serve (405), with an ``Allow`` header naming every method it does.

The first two are plain ASGI middleware, so the refusal costs no routing, no body and no thread.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from apportion.serve.accounts.auth import Authenticator, TooManyFailures


class BodyTooLarge(HTTPException):
    """A request body past the server's limit (HTTP 413), found while it arrives."""

    def __init__(self, most: int) -> None:
        super().__init__(status_code=413, detail=too_large(most))


def too_large(most: int) -> str:
    return f"the request body is over {most:,} bytes, the most this server reads (the largest valid job fits)"


async def _answer(send, status: int, detail: str, headers: dict[str, str] | None = None, close: bool = False) -> None:
    """Send a JSON error; ``close``: end the connection after it (the body it carried is not read)."""
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(b"connection", b"close")] if close else []
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


class LimitBody:
    """Answers 413 to a request whose Content-Length is over ``most`` bytes without reading it; a
    body of unknown length (chunked) is counted as it arrives and stops being read at ``most``."""

    def __init__(self, app, most: int) -> None:
        self.app = app
        self.most = most

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _header(scope, b"content-length")
        if length is not None:
            text = length.decode("latin-1").strip()
            if not (text.isascii() and text.isdigit()):
                return await _answer(send, 400, "the Content-Length header is not a number", close=True)
            if len(text) > 20 or int(text) > self.most:
                return await _answer(send, 413, too_large(self.most), close=True)
        seen = 0
        started = over = False

        async def counted_receive():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.most:
                    over = True
                    raise BodyTooLarge(self.most)
            return message

        async def noted_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if over:  # the rest of the body is not read: the connection cannot carry another request
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, counted_receive, noted_send)
        except BodyTooLarge:  # raised where nothing turned it into the answer already
            if not started:
                await _answer(send, 413, too_large(self.most), close=True)


class LimitFailures:
    """Answers 429 (with Retry-After, held back ``hold_s``: throttle.py) to a credential from a
    client over its limit of wrong credentials, unless that very credential got in before
    (auth.Authenticator.check_limit)."""

    def __init__(self, app, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            authorization = _header(scope, b"authorization")
            client = scope.get("client")
            address = client[0] if client else None
            if authorization and self.authenticator.limiter.retry_after(address):  # over: is this one known?
                try:
                    await run_in_threadpool(self.authenticator.check_limit, address, authorization.decode("latin-1"))
                except TooManyFailures as exc:
                    await asyncio.sleep(self.authenticator.limiter.hold_s)
                    return await _answer(send, 429, str(exc), {"Retry-After": str(exc.retry_after),
                                                                 "WWW-Authenticate": "Bearer"})
        await self.app(scope, receive, send)


METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes, scope) -> list[str]:
    """Every method some route of ``routes`` serves at the path of ``scope`` (HEAD with each GET), in a
    fixed order. Starlette's own 405 names only the first route that matched the path, and FastAPI
    makes one route a method: ``OPTIONS /jobs`` would be told ``Allow: POST`` though GET is served."""
    path_scope = {**scope, "method": "GET"}
    methods: set[str] = set()
    for route in routes:
        route_methods = getattr(route, "methods", None)
        if not route_methods:
            continue
        match, _ = route.matches(path_scope)
        if match.name in ("FULL", "PARTIAL"):
            methods |= set(route_methods)
    return sorted(methods, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))


def method_not_allowed(routes, scope) -> JSONResponse:
    """A 405 as JSON ``{"detail": ...}`` with an ``Allow`` header naming every method the path serves."""
    allowed = allowed_methods(routes, scope)
    return JSONResponse(status_code=405, content={"detail": f"{scope.get('method', '?')} is not served at this path "
                                                            f"(it serves {', '.join(allowed)})"},
                        headers={"Allow": ", ".join(allowed)})
