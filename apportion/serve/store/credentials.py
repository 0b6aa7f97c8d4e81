"""Who may call the API: users with their credentials' hashes (accounts/auth.py checks them), and
each attempt's own credential, as a digest."""

from __future__ import annotations

import sqlite3

from apportion.serve.jobs.records import CredentialHash, UserRecord
from apportion.serve.store.connection import StoreConnection
from apportion.serve.store.schema import TableFamily

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (      -- who may call the API (apportion users add): see auth.py
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the number in the user's credential
    name TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL DEFAULT 0,
    salt TEXT NOT NULL,                 -- hex
    digest TEXT NOT NULL,               -- hex, of the credential's secret under kdf
    kdf TEXT NOT NULL,                  -- hmac-sha256 (older: scrypt:16384:8:1)
    created REAL NOT NULL,
    revoked REAL                        -- when its credential was revoked; NULL while it works
);
CREATE TABLE IF NOT EXISTS attempt_credentials (  -- each attempt's own credential, as a SHA-256 digest
    job_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
"""
CREDENTIALS = TableFamily("credentials", SCHEMA)


class CredentialTables(StoreConnection):
    """The ``users`` and ``attempt_credentials`` tables (a part of ``StateStore``)."""

    def put_user(self, name: str, *, admin: bool, salt: str, digest: str, kdf: str, now: float) -> int:
        """Add user ``name`` (or give an existing one a new credential and role); returns its id."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO users (name, admin, salt, digest, kdf, created) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET admin = excluded.admin, salt = excluded.salt,"
                " digest = excluded.digest, kdf = excluded.kdf, created = excluded.created, revoked = NULL",
                (name, int(admin), salt, digest, kdf, now))
            self.add_event(now, None, "user", f"{name}: new credential" + (" (admin)" if admin else ""))
            return int(conn.execute("SELECT id FROM users WHERE name = ?", (name,)).fetchone()[0])

    def rehash_user(self, user_id: int, old_digest: str, *, salt: str, digest: str, kdf: str) -> bool:
        """Store user ``user_id``'s same credential under a new hash, unless it changed meanwhile."""
        with self.transaction() as conn:
            return bool(conn.execute("UPDATE users SET salt = ?, digest = ?, kdf = ? WHERE id = ? AND digest = ?",
                                     (salt, digest, kdf, user_id, old_digest)).rowcount)

    def revoke_user(self, name: str, now: float) -> bool:
        """End user ``name``'s credential; False when there is no such user with a working one."""
        with self.transaction() as conn:
            changed = conn.execute("UPDATE users SET revoked = ? WHERE name = ? AND revoked IS NULL",
                                   (now, name)).rowcount
            if changed:
                self.add_event(now, None, "user", f"{name}: credential revoked")
        return bool(changed)

    def user(self, name: str) -> UserRecord | None:
        """User ``name`` with its credential's hash, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
        return _user(row) if row is not None else None

    def user_by_id(self, user_id: int) -> UserRecord | None:
        """User ``user_id`` with its credential's hash, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM users WHERE id = ?", (user_id,)).fetchone()
        return _user(row) if row is not None else None

    def users(self) -> list[UserRecord]:
        """Every user ever added (revoked ones too), by name; without their hashes."""
        with self._read() as conn:
            rows = conn.execute("SELECT id, name, admin, created, revoked FROM users ORDER BY name").fetchall()
        return [UserRecord(r["id"], r["name"], bool(r["admin"]), r["created"], r["revoked"]) for r in rows]

    def has_users(self) -> bool:
        """Has any user ever been added? (Then the server asks every caller for a credential.)"""
        with self._read() as conn:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM users)").fetchone()[0] == 1

    def put_attempt_credential(self, job_id: int, attempt: int, digest: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO attempt_credentials VALUES (?, ?, ?)", (job_id, attempt, digest))

    def attempt_credential(self, job_id: int, attempt: int) -> str | None:
        """The digest of the credential of attempt ``attempt`` of job ``job_id``, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT digest FROM attempt_credentials WHERE job_id = ? AND attempt = ?",
                               (job_id, attempt)).fetchone()
        return row[0] if row is not None else None


def _user(row: sqlite3.Row) -> UserRecord:
    return UserRecord(row["id"], row["name"], bool(row["admin"]), row["created"], row["revoked"],
                      CredentialHash(row["salt"], row["digest"], row["kdf"]))
