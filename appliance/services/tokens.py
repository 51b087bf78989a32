"""API tokens: created by the CLI, stored hashed, roles admin | readonly.

A token reads ``zds_<id>_<secret>``; only sha256(secret) is stored. The secret has 256
bits of entropy, so a plain hash (no key stretching) is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from appliance.errors import Conflict, InvalidInput, NotFound, Unauthorized
from appliance.store import Store

Role = Literal["admin", "readonly"]
ROLES: tuple[Role, ...] = ("admin", "readonly")
_TOKEN = re.compile(r"zds_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class Principal:
    token_id: str
    name: str
    role: Role


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenService:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, name: str, role: str, token: str | None = None) -> str:
        """A new token (shown once). ``token`` imports a given one (first boot, or the
        same token on both nodes of an HA pair); importing it again changes nothing,
        and a given token whose id is here with another secret is refused."""
        if role not in ROLES:
            raise InvalidInput(f"invalid role {role!r}: admin or readonly")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", name):
            raise InvalidInput("token name: 1-64 letters, digits, '_', '.', '@', '-'")
        if token is None:
            token = f"zds_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
        m = _TOKEN.fullmatch(token)
        if not m:
            raise InvalidInput("malformed token (expected zds_<12 hex>_<43 characters>)")
        have = self.store.get_token(m.group(1))
        if have is None:
            self.store.add_token(m.group(1), name, role, _digest(m.group(2)))
        elif not hmac.compare_digest(have["hash"], _digest(m.group(2))):
            raise Conflict(f"token {m.group(1)} exists here with another secret: revoke it "
                           "first to import this one")
        return token

    @staticmethod
    def well_formed(token: str) -> bool:
        """Whether ``token`` has a token's shape, checked without reading the store: a
        request with a made-up token then costs no SQLite read at all (api/guard.py)."""
        return _TOKEN.fullmatch(token) is not None

    def verify(self, token: str) -> Principal:
        m = _TOKEN.fullmatch(token or "")
        row = self.store.get_token(m.group(1)) if m else None
        if m is None or row is None or not hmac.compare_digest(row["hash"],
                                                              _digest(m.group(2))):
            raise Unauthorized("invalid or revoked token")
        self.store.touch_token(row["id"])
        return Principal(row["id"], row["name"], row["role"])

    def list(self) -> list[dict[str, Any]]:
        return self.store.list_tokens()

    def revoke(self, token_id: str) -> None:
        if not self.store.delete_token(token_id):
            raise NotFound(f"token {token_id!r} not found")
