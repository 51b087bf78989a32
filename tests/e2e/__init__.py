"""The e2e suite. A package, so that pytest imports tests/e2e/conftest.py as
``tests.e2e.conftest``, the module habed.py and the pair's module import: one module, one
session appliance that ``booted()`` can set aside (as a top-level ``conftest`` it was a
second copy whose session appliance never started, and never paused)."""
