"""The API's front door: who may ask, how much they may send and how many may ask at
once, checked before any route runs and before a byte of the body is read.

A pure ASGI middleware: it sees the request line and headers first, and refuses with the
one error envelope (api/errors.py) without reading the body. For every protected path
(everything under /api/v1 but ``GET /api/v1/system/health``, and /metrics), in order:

1. ``max_in_flight`` protected requests already in flight: 503 ``busy`` (Retry-After);
2. no valid bearer token: 401; a readonly token and a method that changes: 403;
   in an HA pair, a change on the node that does not hold its pool: 503 ``not_active``
   naming the node that does (:meth:`ClusterService.refusal`);
3. ``max_per_token`` requests of this token already in flight: 429 ``too_many_requests``
   (Retry-After), so one token (a script long-polling jobs) never takes all the capacity;
4. a body over ``max_body`` (``max_result_body`` for a client's probe result), announced
   by Content-Length or counted as it streams: 413 ``too_large``.

Only then is the body read (into memory: it is at most the limit, and the routes read it
whole anyway) and the route run, with the verdict in ``request.state.principal`` for
:func:`api.deps.authorize`. Health needs no token; one given is checked the same way and
makes the full answer (api/routes/system.py), and health is never refused: past a limit
it gives the public answer. A refusal made before the body is read closes the
connection, so the server stops reading what the client is still sending; a 413 first
reads and drops the rest of the body, within bounds (``DISCARD_BYTES``, see there).

While a route runs, the guard watches for the client leaving and then cancels the route:
a long-poll whose client went away stops holding its token's slot at once. (A route that
runs in a thread still finishes its work; only what comes after is cut.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Literal

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import engine_error_response, error_response
from appliance.engine import Engine
from appliance.errors import Forbidden, Unauthorized, ZdsError
from appliance.services.tokens import Principal

API_PREFIX = "/api/v1"
HEALTH_PATH = "/api/v1/system/health"
RESULTS_PATH = "/api/v1/probes/results"  # POST: a probe result measured on a client
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRY_AFTER = "1"  # seconds: a slot frees as soon as one request answers
# Token checks read SQLite (and record last_used), so they run off the event loop on
# threads of their own: a flood of made-up tokens queues there (behind max_in_flight) and
# never takes the threads the routes run on; a token that is not even shaped like one is
# refused without a thread. No cache of verified tokens: `zds token revoke` runs in
# another process, so a cache could not see a revoke without reading the store, which is
# all it would save (one indexed read and one write). One pool per process (one API).
VERIFY_THREADS = 2
_VERIFY_POOL = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="zds-auth")

# A 413 goes to a client that holds a valid token and is still sending its body. Closing
# a connection with unread bytes makes the kernel send a reset, and a reset can overtake
# the answer: through QEMU's user network a client got the 413's headers and lost its
# body. So the rest of the body is read and dropped first, up to this many bytes past the
# limit and for this long; beyond that the answer goes at once (and may be lost).
DISCARD_BYTES = 16 << 20
DISCARD_SECONDS = 10.0

PathKind = Literal["protected", "health", "open"]


def path_kind(path: str) -> PathKind:
    """What the guard does for ``path``: check a token (protected), check one if given
    (health), or only cap the body (the console's files, /openapi.json, /docs)."""
    if path == HEALTH_PATH:
        return "health"
    if path == API_PREFIX or path.startswith(API_PREFIX + "/") \
            or path == "/metrics" or path.startswith("/metrics/"):
        return "protected"
    return "open"


class _ClientGone(Exception):
    """The client closed the connection before its body was read."""


class _TooLarge(Exception):
    """The body grew past the limit; ``ended`` when that chunk was its last."""

    def __init__(self, ended: bool) -> None:
        super().__init__(ended)
        self.ended = ended


class Guard:
    """The middleware (see the module's docstring); ``app.add_middleware(Guard, engine=...)``.

    ``in_flight`` and ``per_token`` count the protected requests being answered."""

    def __init__(self, app: ASGIApp, engine: Engine) -> None:
        self.app = app
        self.engine = engine
        settings = engine.settings
        self.max_body = settings.max_body
        self.max_result_body = settings.max_result_body
        self.max_in_flight = settings.max_in_flight
        self.max_per_token = settings.max_per_token
        # the counters are changed from the event loop, but tests may drive one app from
        # several loops (one per TestClient)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.per_token: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = path_kind(_route_path(scope))
        token = _bearer(scope)
        if kind == "open" or (kind == "health" and token is None):
            await self._anonymous(scope, receive, send)
            return
        if not self._enter():
            if kind == "health":  # health always answers: the public one costs nothing
                await self._anonymous(scope, receive, send)
                return
            await self._refuse(scope, receive, send, 503, "busy",
                               f"the API is answering {self.max_in_flight} requests already "
                               "(max_in_flight): retry in a moment",
                               {"limit": self.max_in_flight}, retry=True)
            return
        try:
            await self._admit(scope, receive, send, kind, token)
        finally:
            self._leave()

    async def _admit(self, scope: Scope, receive: Receive, send: Send, kind: PathKind,
                     token: str | None) -> None:
        principal: Principal | None
        try:
            principal = await self._verify(token)
            if kind == "protected" and principal.role != "admin" \
                    and scope["method"] not in READ_METHODS:
                raise Forbidden(f"token {principal.name!r} is readonly")
            if kind == "protected" and scope["method"] not in READ_METHODS:
                # in an HA pair, a change on the node that does not hold its pool: 503
                # naming the node that does (pacemaker's state, cached a few seconds)
                refusal = await anyio.to_thread.run_sync(
                    self.engine.cluster.refusal, scope["method"], _route_path(scope))
                if refusal is not None:
                    raise refusal
        except ZdsError as exc:
            if kind != "health":
                await self._refuse_error(scope, receive, send, exc)
                return
            principal = None  # health with a token it cannot use: the public answer
        scope.setdefault("state", {})["principal"] = principal
        if principal is None:
            await self._serve(scope, receive, send, watch=True)
            return
        with self._token_slot(principal) as admitted:
            if not admitted and kind == "health":
                await self._anonymous(scope, receive, send)
                return
            if not admitted:
                await self._refuse(scope, receive, send, 429, "too_many_requests",
                                   f"token {principal.name!r} has {self.max_per_token} "
                                   "requests in flight already (max_per_token): retry when "
                                   "one has answered", {"limit": self.max_per_token},
                                   retry=True)
                return
            await self._serve(scope, receive, send, watch=True)

    async def _anonymous(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Served without a principal: open paths, and health's public answer."""
        scope.setdefault("state", {})["principal"] = None
        await self._serve(scope, receive, send, watch=False)

    async def _verify(self, token: str | None) -> Principal:
        if token is None:
            raise Unauthorized("missing bearer token (Authorization: Bearer zds_...)")
        tokens = self.engine.tokens
        if not tokens.well_formed(token):
            raise Unauthorized("invalid or revoked token")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_VERIFY_POOL, tokens.verify, token)

    # ----------------------------------------------------------------- counting
    def _enter(self) -> bool:
        with self._lock:
            if self.in_flight >= self.max_in_flight:
                return False
            self.in_flight += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    @contextmanager
    def _token_slot(self, principal: Principal) -> Iterator[bool]:
        key = principal.token_id
        with self._lock:
            held = self.per_token.get(key, 0)
            admitted = held < self.max_per_token
            if admitted:
                self.per_token[key] = held + 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    left = self.per_token[key] - 1
                    if left:
                        self.per_token[key] = left
                    else:
                        del self.per_token[key]

    # ----------------------------------------------------------------- the body and the app
    async def _serve(self, scope: Scope, receive: Receive, send: Send, *, watch: bool) -> None:
        limit, setting = (self.max_result_body, "max_result_body") \
            if scope["method"] == "POST" and _route_path(scope) == RESULTS_PATH \
            else (self.max_body, "max_body")
        length = _content_length(scope)
        body = None
        ended = False
        if length is None or length <= limit:
            try:
                body = await _read_body(receive, limit)
            except _ClientGone:
                return
            except _TooLarge as too_large:
                ended = too_large.ended
        if body is None:
            if not ended and (length is None or length <= limit + DISCARD_BYTES) \
                    and not await _discard_body(receive, limit + DISCARD_BYTES):
                return  # the client left
            await self._refuse(scope, receive, send, 413, "too_large",
                               f"the request body is larger than {limit} bytes, the most "
                               f"this API takes here ({setting})", {"limit": limit})
            return
        await self._run(scope, receive, send, body, watch=watch)

    async def _run(self, scope: Scope, receive: Receive, send: Send, body: bytes, *,
                   watch: bool) -> None:
        """The app, given the body read already; with ``watch``, cancelled when the client
        leaves before the answer is complete."""
        replayed = False
        gone = asyncio.Event()
        answered = False

        async def app_receive() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            if not watch:
                return await receive()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def app_send(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered = True
            await send(message)

        if not watch:
            await self.app(scope, app_receive, send)
            return
        with anyio.CancelScope() as cancel:
            async def watcher() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone.set()
                if not answered:
                    cancel.cancel()

            task = asyncio.get_running_loop().create_task(watcher())
            try:
                await self.app(scope, app_receive, app_send)
            finally:
                task.cancel()

    # ----------------------------------------------------------------- refusals
    async def _refuse_error(self, scope: Scope, receive: Receive, send: Send,
                            exc: ZdsError) -> None:
        await engine_error_response(exc, _closing(scope))(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, code: str,
                      message: str, detail: dict[str, int], *, retry: bool = False) -> None:
        headers = _closing(scope)
        if retry:
            headers["Retry-After"] = RETRY_AFTER
        await error_response(status, code, message, detail, headers)(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the routes match (without a root_path the server was given)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root + "/") else path


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer`` header, None without one."""
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # the server refuses a malformed length itself


def _closing(scope: Scope) -> dict[str, str]:
    """``Connection: close`` when the request announces a body that was not read."""
    length = _content_length(scope)
    chunked = "chunked" in (_header(scope, b"transfer-encoding") or "").lower()
    return {"Connection": "close"} if chunked or (length or 0) > 0 else {}


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body; :class:`_TooLarge` as soon as it grows past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if size > limit:
            raise _TooLarge(ended=not more)
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)


async def _discard_body(receive: Receive, most: int) -> bool:
    """Read and drop the rest of the body: up to its end, ``most`` bytes or
    ``DISCARD_SECONDS``, whichever comes first. False when the client left meanwhile."""
    dropped = 0
    with anyio.move_on_after(DISCARD_SECONDS):
        while dropped <= most:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            dropped += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
    return True
