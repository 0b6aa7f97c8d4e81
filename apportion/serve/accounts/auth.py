"""Who is calling the server's API, from the credential in ``Authorization: Bearer``.

Three kinds of credential, each a random secret that the state file holds only as a hash:

- a **user's**, issued by ``apportion users add NAME`` (``u<ID>.<SECRET>``, stored as an
  HMAC-SHA256 of the secret keyed with a random per-user salt): its bearer is that user, an
  admin if the user was added with ``--admin``;
- the **server's admin token** (``apportion serve --token-file``), compared in constant time:
  its bearer is an admin and may name the user it acts for;
- an **attempt's**, made for each attempt the server starts and given to it as
  ``APPORTION_TOKEN`` (``a<JOB>.<ATTEMPT>.<SECRET>``, stored as a SHA-256 digest: the secret is
  256 random bits, nothing to guess): it may renew the lease of that attempt and report its
  progress, nothing else, and only while that attempt is the job's current one.

A server with no user in its state file and no admin token is *open*: it binds to loopback
only, asks for no credential, and takes the ``user`` a request names as given (one person's
machine). Adding the first user turns credentials on for every caller from then on.

Why a fast hash and not a slow one: every secret is 256 random bits, which no hash speed makes
guessable, so a slow KDF (scrypt) protects nothing and only makes each wrong credential cost the
server 16 MiB and ~50 ms, which a flood of made-up credentials turns into a denial of service.
The per-user salt as the HMAC key makes two users' digests unrelated; a server-wide key would
add nothing, since it would sit beside the digests in the same state file. Users added with
scrypt (``scrypt:16384:8:1``) still get in: their secret is checked with scrypt, one check at a
time, and on success their hash is replaced with the fast one (migrated on first use). A wrong
credential costs one lookup and one HMAC; a client that tries too many is refused (throttle.py).

Some names carry meaning (``RESERVED_NAMES``): the admin token acts as user ``admin``, and
``root`` reads as the machine's superuser. No user may be added under them, and a user already
stored under one is refused at the door (and the server will not start) until revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from apportion.serve.base.bounds import MAX_ATTEMPT, MAX_JOB_ID
from apportion.serve.accounts.throttle import FailureLimiter
from apportion.serve.base.trusted_file import trust_problem

if TYPE_CHECKING:
    from apportion.serve.store.state import StateStore

_SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}
SCRYPT_KDF = "scrypt:16384:8:1"  # how users added by older apportions were hashed (migrated on use)
KDF = "hmac-sha256"  # how a user's secret is hashed, stored beside each hash
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
RESERVED_NAMES = frozenset({"admin", "root"})  # the admin token's user; the superuser's (any case)
# ids as the state file holds them (1 to 2**63 - 1, at most 19 digits) and attempt numbers to MAX_ATTEMPT
_USER_TOKEN = re.compile(r"u([1-9][0-9]{0,18})\.([0-9a-f]{64})")
_ATTEMPT_TOKEN = re.compile(r"a([1-9][0-9]{0,18})\.([1-9][0-9]{0,9})\.([0-9a-f]{64})")
VERIFIED_KEPT = 10_000  # credentials remembered as verified (each ~200 bytes)


class Unauthorized(Exception):
    """No credential, or one the server does not know (HTTP 401)."""


class TooManyFailures(Exception):
    """A client over its limit of wrong credentials (HTTP 429); ``retry_after`` in seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many wrong credentials from this address: try again in {retry_after} s")
        self.retry_after = retry_after


class NotAllowed(Exception):
    """A known caller asking for what its credential does not allow (HTTP 403)."""


@dataclass(frozen=True)
class Identity:
    """The caller. ``user`` is None in an open server (no credentials: the request names its user)."""

    user: str | None = None
    admin: bool = False
    attempt: tuple[int, int] | None = None  # an attempt's credential: (job id, attempt number)

    @property
    def open(self) -> bool:
        """True when the server checks no credential (every caller is trusted as it claims)."""
        return self.user is None and not self.admin and self.attempt is None

    def may_see(self, owner: str) -> bool:
        """May this caller read the logs of (and cancel) a job of ``owner``?"""
        return self.open or self.admin or (self.attempt is None and self.user == owner)

    def acting_as(self, claimed: str | None) -> str | None:
        """The user a request acts for: the credential's, or for an admin (or an open server) the one it names.

        NotAllowed when a user's credential names someone else: only admins act for others.
        """
        claimed = claimed.strip() if isinstance(claimed, str) and claimed.strip() else None
        if self.open or self.admin:
            return claimed or self.user
        if claimed is not None and claimed != self.user:
            raise NotAllowed(f"you are {self.user!r}: acting as {claimed!r} is for admins (leave --user and the "
                             "job file's user out)")
        return self.user

    def require_user(self) -> None:
        """NotAllowed for an attempt's credential: it may only renew its lease and report progress."""
        if self.attempt is not None:
            raise NotAllowed(f"this is the credential of attempt {self.attempt[1]} of job {self.attempt[0]}: "
                             "it may only renew that attempt's lease and report its progress")

    def require_admin(self, what: str) -> None:
        """NotAllowed unless this caller is an admin (or the server is open): ``what`` is for admins."""
        if not (self.open or self.admin):
            raise NotAllowed(f"{what} is for admins; you are {self.user!r}" if self.user else f"{what} is for admins")

    def require_attempt(self, job_id: int, attempt: int) -> None:
        """NotAllowed unless this caller may renew the lease of (and report for) that attempt."""
        if self.open or self.admin:
            return
        if self.attempt is None:
            raise NotAllowed("only a job's own attempt (its APPORTION_TOKEN) may renew its lease or report progress")
        if self.attempt != (job_id, attempt):
            raise NotAllowed(f"this is the credential of attempt {self.attempt[1]} of job {self.attempt[0]}, "
                             f"not of attempt {attempt} of job {job_id}")


OPEN = Identity()


def check_secret(secret: str | None, where: str) -> str:
    """``secret`` without surrounding whitespace; ValueError (one line naming ``where``) when it is
    empty or holds whitespace or control characters (no such header could carry it)."""
    text = (secret or "").strip()
    if not text:
        raise ValueError(f"{where} is empty: a credential needs a secret")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"{where} holds whitespace or control characters: a credential is one word")
    return text


def read_secret_file(path: str | Path, where: str | None = None) -> str:
    """The credential in file ``path`` (surrounding whitespace dropped); ValueError (one line) when it
    cannot be read, is empty, other users may read or change it (it must be 0600 or narrower, as ssh
    asks of keys), or it is owned by anyone but this user or root (trusted_file.py)."""
    path = Path(path).expanduser()
    where = where or str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            info = os.fstat(handle.fileno())
            problem = trust_problem(info, path, secret=True)
            text = "" if problem else handle.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: cannot read it: {getattr(err, 'strerror', None) or err}") from None
    if problem:
        raise ValueError(f"{where}: {problem}")
    return check_secret(text, where)


def hash_secret(secret: str, salt: bytes | None = None) -> tuple[str, str]:
    """(salt, digest) in hex: HMAC-SHA256 of ``secret`` keyed with a fresh 16-byte salt (or ``salt``)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    return salt.hex(), hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()


def scrypt_secret(secret: str, salt: bytes) -> str:
    """The digest, in hex, that users added by older apportions were stored with (SCRYPT_KDF)."""
    return hashlib.scrypt(secret.encode(), salt=salt, dklen=32, **_SCRYPT).hex()


_scrypt_one_at_a_time = threading.Lock()  # each scrypt takes 16 MiB: never many at once


def secret_matches(secret: str, salt: str, digest: str, kdf: str = KDF) -> bool:
    """Does ``secret`` hash to ``digest`` under ``salt`` and ``kdf`` (constant-time comparison)?"""
    if kdf == KDF:
        return hmac.compare_digest(hash_secret(secret, bytes.fromhex(salt))[1], digest)
    if kdf == SCRYPT_KDF:
        with _scrypt_one_at_a_time:
            return hmac.compare_digest(scrypt_secret(secret, bytes.fromhex(salt)), digest)
    return False


def reserved(name: str) -> bool:
    """Is ``name`` one that carries meaning (RESERVED_NAMES, in any case)?"""
    return name.lower() in RESERVED_NAMES


def reserved_reason(name: str) -> str:
    """Why ``name`` cannot be a user's, in one line."""
    why = "the admin token acts as user 'admin'" if name.lower() == "admin" else "it reads as the superuser's"
    return f"user name {name!r} is reserved ({why}): choose another"


def add_user(store: StateStore, name: str, admin: bool, now: float, replace: bool = False) -> str:
    """Store user ``name`` with a new credential and return it (the only time it is ever shown).

    ValueError when the name is not a plain word, or the user exists and ``replace`` is not set.
    """
    if not USER_NAME.fullmatch(name or ""):
        raise ValueError(f"user name {name!r}: letters, digits, '.', '_' and '-', starting with a letter or"
                         " digit, at most 64")
    if reserved(name):
        raise ValueError(reserved_reason(name))
    secret = secrets.token_hex(32)
    salt, digest = hash_secret(secret)
    existing = store.user(name)
    if existing is not None and existing.revoked is None and not replace:
        raise ValueError(f"user {name!r} already has a credential (--replace issues a new one, "
                         "`apportion users revoke` ends it)")
    user_id = store.put_user(name, admin=admin, salt=salt, digest=digest, kdf=KDF, now=now)
    return f"u{user_id}.{secret}"


def issue_attempt_credential(store: StateStore, job_id: int, attempt: int) -> str:
    """A new credential for attempt ``attempt`` of job ``job_id`` (its digest stored): what the
    attempt gets as ``APPORTION_TOKEN``."""
    secret = secrets.token_hex(32)
    store.put_attempt_credential(job_id, attempt, hashlib.sha256(secret.encode()).hexdigest())
    return f"a{job_id}.{attempt}.{secret}"


class Authenticator:
    """Maps a request's ``Authorization`` header to an :class:`Identity` (Unauthorized when it cannot).

    A user's credential is checked once (one HMAC); a match is remembered (by the SHA-256 of
    the whole credential) so later calls cost one lookup, which still sees a revocation at once.
    Every credential that got in is remembered too (``VERIFIED_KEPT``, least recent forgotten
    first), so that it still gets in while its address is over the limit of wrong ones.
    """

    def __init__(self, store: StateStore, admin_token: str | None = None,
                 limiter: FailureLimiter | None = None) -> None:
        self.store = store
        self.admin_token = admin_token
        self.limiter = limiter if limiter is not None else FailureLimiter()
        self._on = admin_token is not None
        self._verified: dict[str, tuple[int, str]] = {}  # sha256(credential) -> (user id, stored digest)
        self._passed: OrderedDict[str, None] = OrderedDict()  # sha256 of credentials that got in lately
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Does this server ask every caller for a credential? Once on (a user was added), stays on."""
        if not self._on and self.store.has_users():
            self._on = True
        return self._on

    def passed(self, authorization: str | None) -> bool:
        """Did this very ``Authorization`` header get in lately? (Costs one SHA-256, no lookup.)"""
        key = _key(_given(authorization))
        with self._lock:
            return key in self._passed

    def check_limit(self, client: str | None, authorization: str | None) -> None:
        """TooManyFailures when ``client`` is over its limit of wrong credentials and this one has
        not got in before (nor is a current attempt's: a job started during a flood from its own
        machine must get its first lease); answered before any user is looked up."""
        retry_after = self.limiter.retry_after(client)
        if retry_after and not self.passed(authorization) and not self._current_attempt(authorization):
            raise TooManyFailures(retry_after)

    def _current_attempt(self, authorization: str | None) -> bool:
        """Is this a working attempt's credential? (One lookup and one SHA-256: no slow hash.)"""
        match = _ATTEMPT_TOKEN.fullmatch(_given(authorization))
        if not match or int(match.group(1)) > MAX_JOB_ID or int(match.group(2)) > MAX_ATTEMPT:
            return False
        try:
            self._attempt(int(match.group(1)), int(match.group(2)), match.group(3))
        except Unauthorized:
            return False
        return True

    def identify(self, authorization: str | None, client: str | None = None) -> Identity:
        """The caller with this header, from address ``client``; Unauthorized (the failure counted
        against ``client``) or TooManyFailures when it cannot be let in."""
        if not self.required:
            return OPEN
        if authorization:
            self.check_limit(client, authorization)
        try:
            who = self._identify(authorization)
        except Unauthorized:
            if authorization:
                self.limiter.failed(client)
            raise
        key = _key(_given(authorization))
        with self._lock:
            self._passed[key] = None
            self._passed.move_to_end(key)
            while len(self._passed) > VERIFIED_KEPT:
                self._passed.popitem(last=False)
        return who

    def _identify(self, authorization: str | None) -> Identity:
        scheme, _, given = (authorization or "").strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise Unauthorized("this server requires a credential (Authorization: Bearer ...): --token-file, "
                               "APPORTION_TOKEN or ~/.config/apportion/token")
        if self.admin_token is not None and hmac.compare_digest(given.encode(), self.admin_token.encode()):
            return Identity(user="admin", admin=True)
        match = _ATTEMPT_TOKEN.fullmatch(given)
        if match and int(match.group(1)) <= MAX_JOB_ID and int(match.group(2)) <= MAX_ATTEMPT:
            return self._attempt(int(match.group(1)), int(match.group(2)), match.group(3))
        match = _USER_TOKEN.fullmatch(given)
        if match and int(match.group(1)) <= MAX_JOB_ID:
            return self._user(int(match.group(1)), match.group(2), given)
        raise Unauthorized("this credential is not one this server knows")

    def _attempt(self, job_id: int, attempt: int, secret: str) -> Identity:
        stored = self.store.attempt_credential(job_id, attempt)
        if stored is None or not hmac.compare_digest(hashlib.sha256(secret.encode()).hexdigest(), stored):
            raise Unauthorized("this credential is not one this server knows")
        return Identity(attempt=(job_id, attempt))

    def _user(self, user_id: int, secret: str, whole: str) -> Identity:
        row = self.store.user_by_id(user_id)
        if row is None:
            raise Unauthorized("this credential is not one this server knows")
        if row.revoked is not None:
            raise Unauthorized(f"the credential of user {row.name!r} has been revoked")
        if reserved(row.name):
            raise Unauthorized(f"{reserved_reason(row.name)} (apportion users revoke {row.name}, then add the "
                               "user under another name)")
        key = _key(whole)
        with self._lock:
            known = self._verified.get(key)
        stored = row.hash
        if known != (user_id, stored.digest):
            if not secret_matches(secret, stored.salt, stored.digest, stored.kdf):
                raise Unauthorized("this credential is not one this server knows")
            verified = stored.digest
            if stored.kdf != KDF:  # an older, slow hash: replace it now that the secret is known
                salt, digest = hash_secret(secret)
                if self.store.rehash_user(user_id, stored.digest, salt=salt, digest=digest, kdf=KDF):
                    verified = digest
            with self._lock:
                self._verified[key] = (user_id, verified)
        return Identity(user=row.name, admin=row.admin)


def _given(authorization: str | None) -> str:
    """The credential in an ``Authorization`` header's value (whatever its scheme)."""
    return (authorization or "").strip().partition(" ")[2].strip()


def _key(credential: str) -> str:
    """What a credential is remembered by: its SHA-256 (any text, even one no header can carry)."""
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()
