"""Errors the engine raises. Each maps to one HTTP status in the API adapter.

Every error carries a human message that says what was wrong and what to do; the engine
raises them *before* changing anything wherever it can check first.
"""

from __future__ import annotations


class ZdsError(Exception):
    """Base of all engine errors. ``status`` is the HTTP status the API answers with."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, detail: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}


class InvalidInput(ZdsError):
    """A name, IQN, client, size or option is malformed (nothing was changed)."""

    status = 422
    code = "invalid_input"


class Unsupported(InvalidInput):
    """Asked for something this appliance cannot do (its kernel lacks it); the message
    says why and what to use instead. Nothing was changed."""

    code = "unsupported"


class NotFound(ZdsError):
    status = 404
    code = "not_found"


class DeviceMissing(NotFound):
    """A block device to serve (a zvol's /dev link) is not there: udev has not made it
    yet, or lost the event (the reconciler waits for it and re-triggers udev)."""


class Conflict(ZdsError):
    """Name clash, resource in use, or a state that forbids the operation."""

    status = 409
    code = "conflict"


class InsufficientSpace(ZdsError):
    """The pool cannot hold what was asked for (409: the request conflicts with free space)."""

    status = 409
    code = "insufficient_space"


class Unavailable(ZdsError):
    """A daemon or kernel facility the operation needs is down (ZFS, LIO, ganesha)."""

    status = 503
    code = "unavailable"


class Busy(Unavailable):
    """Another change holds the appliance's one lock longer than a request may wait."""

    code = "busy"


class NotActive(Unavailable):
    """In an HA pair: this node does not hold the pool the change is for (or none of the
    pair's pools); ``detail`` names the node that does. Nothing was changed."""

    code = "not_active"


class Unauthorized(ZdsError):
    status = 401
    code = "unauthorized"


class Forbidden(ZdsError):
    status = 403
    code = "forbidden"


class HostCommandFailed(ZdsError):
    """A host command failed in a way the engine could not classify."""

    status = 500
    code = "host_command_failed"
