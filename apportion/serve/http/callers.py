"""Who may call a route (the "who" column of ``routes.py``), and what every handler is given: the server.

Each rule turns a request's ``Authorization`` header into the caller's
:class:`~apportion.serve.accounts.auth.Identity`, or refuses it: HTTP 401 for a credential that
cannot be let in, 403 (NotAllowed) for one that may not make this call.

- ``ANYONE``: no credential looked at (the dashboard's page and assets, the API document);
- ``READER``: the dashboard's JSON: a credential where one is given, else anyone on an open
  server, else an anonymous reader on this machine (None); 401 from elsewhere;
- ``USER``: a person's credential or the admin token (an attempt's may not list, submit, cancel or read);
- ``admin(what)``: as ``USER``, and then an admin (or an open server), checked once the request is read;
- ``ATTEMPT``: any credential; the handler then checks it is that of the attempt its body names
  (``Identity.require_attempt``): a job's own attempt renews its lease and reports its progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from fastapi import Header, HTTPException, Request

from apportion.serve.accounts.auth import Authenticator, Identity, Unauthorized
from apportion.serve.base.loopback import is_loopback
from apportion.serve.scheduler.scheduler import Scheduler
from apportion.serve.views.history import History
from apportion.serve.views.job_list import JobList


@dataclass(frozen=True)
class Served:
    """What the handlers answer from: the scheduler (its requests, and its read side ``scheduler.views``),
    who checks credentials, the dashboard's history, the job list and what ``/metrics`` answers."""

    scheduler: Scheduler
    authenticator: Authenticator
    history: History
    listing: JobList
    scrape: Callable  # () -> the Response of GET /metrics
    anonymous: object  # dashboard.AnonymousState: the view a reader without a credential gets, once a round


def identify(request: Request, authorization: str | None) -> Identity:
    """The caller with this ``Authorization`` header; HTTP 401 when it cannot be let in."""
    authenticator = request.app.state.served.authenticator
    try:
        return authenticator.identify(authorization, request.client.host if request.client else None)
    except Unauthorized as exc:
        raise HTTPException(status_code=401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}) from None


def any_caller(request: Request, authorization: Optional[str] = Header(default=None)) -> Identity:
    """Any credential (a person's, the admin token, an attempt's)."""
    return identify(request, authorization)


def user_caller(request: Request, authorization: Optional[str] = Header(default=None)) -> Identity:
    """A person's (or the admin token's) credential: an attempt's may not list, submit, cancel or read."""
    who = identify(request, authorization)
    who.require_user()
    return who


def reader(request: Request, authorization: Optional[str] = Header(default=None)) -> Identity | None:
    """Who reads the dashboard: the credential given (checked wherever it comes from), else an open
    server's anyone, else an anonymous reader on loopback (None); 401 for anyone else."""
    if authorization:
        who = identify(request, authorization)
        who.require_user()
        return who
    if not request.app.state.served.authenticator.required:
        return Identity()
    if request.client is not None and is_loopback(request.client.host):
        return None
    raise HTTPException(status_code=401, detail="reading this server from another machine needs a credential "
                                                "(Authorization: Bearer ...)", headers={"WWW-Authenticate": "Bearer"})


@dataclass(frozen=True)
class Caller:
    """One rule of who may call: its name (as ``routes.py`` and docs/serve.md say it), the FastAPI
    dependency that finds the caller (None: nobody is asked), and, where the caller must be an admin,
    what the route does (said in its 403)."""

    name: str
    dependency: Callable | None
    admin: str | None = None

    def check(self, request: Request) -> Identity | None:
        """The caller of ``request`` under this rule, for a handler that asks itself (a submit, in its thread)."""
        if self.dependency is None:
            return None
        who = self.dependency(request, request.headers.get("authorization"))
        if self.admin is not None:
            who.require_admin(self.admin)
        return who


ANYONE = Caller("anyone", None)
READER = Caller("a reader of the dashboard", reader)
USER = Caller("a user", user_caller)
ATTEMPT = Caller("the job's attempt", any_caller)


def admin(what: str) -> Caller:
    """An admin's credential (or an open server), for ``what`` (what its 403 says is for admins)."""
    return Caller("an admin", user_caller, admin=what)
