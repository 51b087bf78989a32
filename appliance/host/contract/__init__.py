"""Contract checks shared by the real host adapters and their in-memory fakes.

Each ``check_*`` function drives an adapter through its documented behaviour, error
contract included, with plain ``assert``s. tests/unit/test_contract_fakes.py runs them
against the fakes; ``python -m appliance.host.contract`` runs them against the real
adapters (inside the appliance image, on a scratch pool of sparse files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.errors import ZdsError


def expect(error: type[ZdsError], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ZdsError:
    """Calls ``fn`` and asserts it raises exactly ``error`` (not a sibling engine error)."""
    try:
        fn(*args, **kwargs)
    except ZdsError as exc:
        assert type(exc) is error or isinstance(exc, error), (
            f"{getattr(fn, '__name__', fn)}{args} raised {type(exc).__name__}: {exc}, "
            f"expected {error.__name__}"
        )
        assert str(exc), "engine errors must carry a message"
        return exc
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} did not raise {error.__name__}")
