"""Contract checks for :class:`appliance.host.hooks.HookHost` (real ``Hooks`` and
``FakeHooks``). The hooks directory must hold three programs: ``zds-ok`` (prints
"frozen", exits 0), ``zds-fail`` (prints "cannot freeze" on stderr, exits 3) and
``zds-slow`` (sleeps 5 s)."""

from __future__ import annotations

from appliance.errors import InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.hooks import HookHost


def check_hooks(hooks: HookHost, hooks_dir: str) -> None:
    full = hooks.check(["zds-ok", "--db", "main"])
    assert full == (f"{hooks_dir}/zds-ok", "--db", "main"), full
    assert hooks.check([f"{hooks_dir}/zds-ok"])[0] == f"{hooks_dir}/zds-ok"
    # what the directory holds is state (404); a name that cannot be a file there is 422
    expect(NotFound, hooks.check, ["zds-missing"])
    expect(NotFound, hooks.check, ["/bin/sh", "-c", "id"])  # outside the directory
    expect(InvalidInput, hooks.check, ["../zds-ok"])
    expect(NotFound, hooks.check, [f"{hooks_dir}/../zds-ok"])
    expect(InvalidInput, hooks.check, [])
    expect(InvalidInput, hooks.check, ["zds-ok", "a\nb"])

    ok = hooks.run(["zds-ok"], timeout=10, env={"ZDS_POLICY": "p"})
    assert ok.ok and ok.returncode == 0 and "frozen" in ok.stdout, ok
    failed = hooks.run(["zds-fail"], timeout=10, env={})
    assert not failed.ok and failed.returncode == 3 and "cannot freeze" in failed.stderr
    assert "exit 3" in failed.summary()
    slow = hooks.run(["zds-slow"], timeout=0.5, env={})
    assert slow.returncode is None and slow.error and "timed out" in slow.error, slow
    missing = hooks.run(["zds-missing"], timeout=5, env={})
    assert missing.returncode is None and missing.error and "does not exist" in missing.error
