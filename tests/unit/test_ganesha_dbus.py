"""The real Ganesha adapter on a RecordingRunner fed with replies captured from
nfs-ganesha 4.3 (tests/unit/fixtures/ganesha): argv, parsing, error mapping, rollback."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.errors import Conflict, HostCommandFailed, InvalidInput, NotFound, Unavailable
from appliance.host.dbus_send import parse_dbus_reply
from appliance.host.ganesha import Ganesha, GaneshaRefused
from appliance.host.ganesha_config import ClientRule, ExportSpec, render_export_block
from appliance.host.ganesha_replies import (
    parse_display_export,
    parse_export_message,
    parse_show_clients,
    parse_show_exports,
)
from appliance.host.nfs_server import client_admitted
from appliance.host.run import CommandResult, RecordingRunner

FIXTURES = Path(__file__).parent / "fixtures" / "ganesha"
SHOW_EXPORTS = (FIXTURES / "ShowExports.txt").read_text()
SHOW_CLIENTS = (FIXTURES / "ShowClients.txt").read_text()
DISPLAY = {101: (FIXTURES / "DisplayExport-101.txt").read_text(),
           102: (FIXTURES / "DisplayExport-102.txt").read_text()}
ADD_ERRORS = (FIXTURES / "AddExport-errors.txt").read_text()
HEADER = ("method return time=1795314681.8 sender=:1.0 -> destination=:1.6 serial=48 "
          "reply_serial=2\n")
ADDED = HEADER + '   string "1 exports added"\n'
UPDATED = HEADER + '   string "1 exports updated"\n'
EMPTY = HEADER
NOT_FOUND = ("Error org.freedesktop.DBus.Error.InvalidArgs: lookup_export failed with "
             "Export id not found")
ALREADY = ("Error org.freedesktop.DBus.Error.InvalidFileContent: Selected entries in "
           "/x/export-101.conf already active!!!")
NO_SERVICE = ("Error org.freedesktop.DBus.Error.ServiceUnknown: The name org.ganesha.nfsd "
              "was not provided by any .service files")
NO_BUS = ('Failed to open connection to "system" message bus: Failed to connect to socket '
          "/run/dbus/system_bus_socket: No such file or directory")

Reply = str | tuple[int, str]  # stdout, or (returncode, stderr)


class Bus:
    """Answers dbus-send calls by method name (a list is consumed in order)."""

    def __init__(self) -> None:
        self.replies: dict[str, Reply | list[Reply] | Callable[[tuple[str, ...]], Reply]] = {}
        self.runner = RecordingRunner(responders=[self._answer])

    def _answer(self, argv: tuple[str, ...], _input: str | None) -> CommandResult:
        assert argv[0] == "dbus-send"
        method = argv[6].rsplit(".", 1)[-1]
        reply = self.replies.get(method, EMPTY)
        if isinstance(reply, list):
            reply = reply.pop(0)
        if callable(reply):
            reply = reply(argv)
        if isinstance(reply, tuple):
            return CommandResult(argv, reply[0], "", reply[1])
        return CommandResult(argv, 0, reply, "")

    def move_101(self, path: str) -> None:
        """Pretend the captured export 101 lives at ``path``."""
        self.replies["ShowExports"] = SHOW_EXPORTS.replace("/tmp/gtry/data/ds1", path)
        self.replies["DisplayExport"] = lambda argv: DISPLAY[101].replace(
            "/tmp/gtry/data/ds1", path) if argv[7] == "uint16:101" else DISPLAY[102]

    def methods(self) -> list[str]:
        return [c[6].rsplit(".", 1)[-1] for c in self.runner.calls]


@pytest.fixture
def bus() -> Bus:
    b = Bus()
    b.replies["ShowExports"] = SHOW_EXPORTS
    b.replies["ShowClients"] = SHOW_CLIENTS
    b.replies["DisplayExport"] = lambda argv: DISPLAY.get(int(argv[7].split(":")[1]),
                                                          (1, NOT_FOUND))
    return b


@pytest.fixture
def g(bus: Bus, tmp_path: Path) -> Ganesha:
    return Ganesha(bus.runner, tmp_path / "exports", "unix:path=/tmp/t/bus.sock")


def spec(export_id: int, path: str, access: str = "RW") -> ExportSpec:
    return ExportSpec(export_id, path, path, (3,), (ClientRule(("127.0.0.1",), access),))  # type: ignore[arg-type]


# -- parsers on captured replies ---------------------------------------------------------

def test_parse_show_exports() -> None:
    stamp, rows = parse_show_exports(SHOW_EXPORTS)
    assert stamp == pytest.approx(1795314642.426208982)
    assert [(r.export_id, r.path) for r in rows] == [
        (0, "/"), (101, "/tmp/gtry/data/ds1"), (102, "/tmp/gtry/data/ds2")]
    assert rows[0].protocols_used == frozenset() and rows[0].last_activity == 0
    assert rows[1].protocols_used == {"NFSv3"}  # MNT is counted per client, not per export
    assert rows[1].last_activity == pytest.approx(1795314699.381381591)


def test_parse_show_clients() -> None:
    now, clients = parse_show_clients(SHOW_CLIENTS)
    assert now == pytest.approx(1795314870.285231399)
    assert [(c.address, c.protocols_used) for c in clients] == [
        ("::ffff:127.0.0.1", frozenset({"NFSv3", "MNT"}))]


def test_parse_display_export() -> None:
    d = parse_display_export(DISPLAY[101])
    assert (d.export_id, d.path, d.pseudo, d.tag) == (
        101, "/tmp/gtry/data/ds1", "/tmp/gtry/data/ds1", "")
    assert d.clients == ("127.0.0.1/32", "10.1.0.0/16", "fd00::/8")
    assert parse_display_export(DISPLAY[102]).clients == ("*", "127.0.0.1/32")


def test_parse_export_message_with_errors() -> None:
    summary, errors = parse_export_message(ADD_ERRORS)
    assert summary == "1 exports added"
    assert len(errors) == 2 and "host-a.example.com" in errors[1]
    assert parse_export_message(UPDATED) == ("1 exports updated", [])


def test_parse_generic_values() -> None:
    text = HEADER + """   string "two
lines with "quotes" inside"
   array [
      dict entry(
         string "k"
         variant             int32 -7
      )
   ]
   array [
   ]
   boolean false
   double 1.5
   byte 255
   object path "/org/x"
"""
    assert parse_dbus_reply(text) == [
        'two\nlines with "quotes" inside', [("k", -7)], [], False, 1.5, 255, "/org/x"]


@pytest.mark.parametrize("text", [
    HEADER + "   struct {\n      uint16 1\n",
    HEADER + '   string "never closed\n',
    HEADER + "   mystery 5\n",
])
def test_parse_garbage_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_dbus_reply(text)


def test_client_admitted() -> None:
    m = ("127.0.0.1/32", "10.1.0.0/16", "fd00::/8", "<unknown>")
    assert client_admitted("::ffff:127.0.0.1", m)
    assert client_admitted("10.1.200.3", m)
    assert client_admitted("fd00::5", m)
    assert not client_admitted("10.2.0.1", m)
    assert not client_admitted("::ffff:192.0.2.1", ("<unknown>",))
    assert client_admitted("192.0.2.1", ("*",))
    assert client_admitted("192.0.2.1", ("@some-netgroup",))  # cannot tell: say yes


# -- the adapter on canned replies -------------------------------------------------------

def test_argv_private_and_system_bus(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    g.list_exports()
    assert bus.runner.calls[0] == (
        "dbus-send", "--bus=unix:path=/tmp/t/bus.sock", "--print-reply",
        "--reply-timeout=30000", "--dest=org.ganesha.nfsd", "/org/ganesha/nfsd/ExportMgr",
        "org.ganesha.nfsd.exportmgr.ShowExports")
    assert len(bus.runner.calls) == 1, "listing is one DBus call, whatever the number"
    g.get_export(101)
    assert bus.runner.calls[1][-2:] == ("org.ganesha.nfsd.exportmgr.DisplayExport",
                                        "uint16:101")
    Ganesha(bus.runner, tmp_path).available()
    assert bus.runner.calls[-1][1] == "--system"


def test_list_exports_skips_pseudo_root_and_get_export_answers_none_when_gone(
        bus: Bus, g: Ganesha) -> None:
    assert [(e.export_id, e.path) for e in g.list_exports()] == [
        (101, "/tmp/gtry/data/ds1"), (102, "/tmp/gtry/data/ds2")]
    shown = g.get_export(101)
    assert shown is not None and shown.pseudo == "/tmp/gtry/data/ds1"
    bus.replies["DisplayExport"] = lambda argv: (1, NOT_FOUND) if argv[7] == "uint16:102" \
        else DISPLAY[101]
    assert g.get_export(102) is None


def test_add_writes_file_then_calls_add_export(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    s = spec(103, str(tmp_path))
    bus.replies["AddExport"] = ADDED
    g.add_export(s)
    f = tmp_path / "exports" / "export-103.conf"
    assert f.read_text() == render_export_block(s) == g.rendered(103)
    assert oct(f.stat().st_mode & 0o777) == "0o644"
    assert bus.runner.calls[-1][-3:] == ("org.ganesha.nfsd.exportmgr.AddExport",
                                         f"string:{f}", "string:EXPORT(Export_Id=103)")
    assert not [p for p in f.parent.iterdir() if p.name.startswith(".")]  # no temp files


def test_add_existing_id_updates_instead(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["UpdateExport"] = UPDATED
    bus.move_101(str(tmp_path))
    g.add_export(spec(101, str(tmp_path)))
    assert bus.methods()[-1] == "UpdateExport"
    assert "AddExport" not in bus.methods()


def test_add_race_already_active_updates(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = (1, ALREADY)
    bus.replies["UpdateExport"] = UPDATED
    g.add_export(spec(103, str(tmp_path)))
    assert bus.methods()[-2:] == ["AddExport", "UpdateExport"]
    assert g.rendered(103) == render_export_block(spec(103, str(tmp_path)))


def test_add_with_skipped_config_rolls_back(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = ADD_ERRORS
    with pytest.raises(InvalidInput, match=r"host-a\.example\.com") as exc:
        g.add_export(spec(103, str(tmp_path)))
    assert len(exc.value.detail["ganesha_errors"]) == 2  # type: ignore[arg-type]
    assert bus.runner.calls[-1][-2:] == ("org.ganesha.nfsd.exportmgr.RemoveExport",
                                         "uint16:103")
    assert g.rendered(103) is None


def test_update_with_skipped_config_restores_old_block(bus: Bus, g: Ganesha,
                                                        tmp_path: Path) -> None:
    bus.move_101(str(tmp_path))
    bus.replies["UpdateExport"] = [UPDATED, ADD_ERRORS.replace("added", "updated"), UPDATED]
    g.update_export(spec(101, str(tmp_path)))
    old = g.rendered(101)
    with pytest.raises(InvalidInput):
        g.update_export(spec(101, str(tmp_path), "RO"))
    assert g.rendered(101) == old
    assert bus.methods()[-2:] == ["UpdateExport", "UpdateExport"]  # new, then old again


def test_refused_add_leaves_no_file(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = (1, "Error org.freedesktop.DBus.Error.InvalidFileContent: "
                                   "0 export entries in x added because (invalid param value)")
    with pytest.raises(GaneshaRefused, match="invalid param value") as exc:
        g.add_export(spec(103, str(tmp_path)))
    assert isinstance(exc.value, HostCommandFailed)
    assert g.rendered(103) is None


def test_update_unknown_is_not_found(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        g.update_export(spec(103, str(tmp_path)))
    assert "UpdateExport" not in bus.methods()


def test_add_and_update_use_two_dbus_calls(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = ADDED
    bus.replies["UpdateExport"] = UPDATED
    g.add_export(spec(103, str(tmp_path)))
    assert bus.methods() == ["ShowExports", "AddExport"]
    bus.move_101(str(tmp_path / "x"))
    (tmp_path / "x").mkdir()
    g.update_export(spec(101, str(tmp_path / "x"), "RO"))
    assert bus.methods()[2:] == ["DisplayExport", "UpdateExport"]


def test_refusal_for_a_pseudo_clash_is_explained(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = (1, "Error org.freedesktop.DBus.Error.InvalidFileContent: "
                                   "0 export entries in x added because (invalid param value)")
    clash = ExportSpec(103, str(tmp_path), "/tmp/gtry/data/ds2", (3,), ())
    with pytest.raises(Conflict, match="pseudo path /tmp/gtry/data/ds2 is already used by "
                                       "live NFS export 102"):
        g.add_export(clash)
    assert g.rendered(103) is None


def test_same_path_under_another_id_is_a_conflict(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.move_101(str(tmp_path))
    with pytest.raises(Conflict, match="already exported by live NFS export 101"):
        g.add_export(ExportSpec(103, str(tmp_path), "/other", (3,), ()))
    with pytest.raises(Conflict, match="cannot change"):
        g.update_export(spec(102, str(tmp_path)))
    assert bus.methods().count("AddExport") == 0


def test_remove(bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    bus.replies["AddExport"] = ADDED
    g.add_export(spec(103, str(tmp_path)))
    g.remove_export(103)
    assert g.rendered(103) is None
    assert bus.runner.calls[-1][-2:] == ("org.ganesha.nfsd.exportmgr.RemoveExport", "uint16:103")
    bus.replies["RemoveExport"] = (1, NOT_FOUND)
    g.remove_export(103)  # unknown: no error
    bus.replies["RemoveExport"] = (1, "Error org.freedesktop.DBus.Error.Failed: boom")
    with pytest.raises(GaneshaRefused):
        g.remove_export(103)


@pytest.mark.parametrize("stderr", [NO_SERVICE, NO_BUS,
                                    "Error org.freedesktop.DBus.Error.NoReply: Did not receive"])
def test_down_is_unavailable(bus: Bus, g: Ganesha, stderr: str, tmp_path: Path) -> None:
    bus.replies["ShowExports"] = (1, stderr)
    bus.replies["Ping"] = (1, stderr)
    bus.replies["RemoveExport"] = (1, stderr)
    assert not g.available()
    with pytest.raises(Unavailable, match="ganesha"):
        g.list_exports()
    with pytest.raises(Unavailable):
        g.add_export(spec(103, str(tmp_path)))
    with pytest.raises(Unavailable):
        g.remove_export(103)
    assert g.rendered(103) is None


def test_dbus_policy_denial_is_explained(bus: Bus, g: Ganesha) -> None:
    bus.replies["ShowExports"] = (1, "Error org.freedesktop.DBus.Error.AccessDenied: "
                                     "Rejected send message, 1 matched rules")
    with pytest.raises(Unavailable, match="DBus policy"):
        g.list_exports()


def test_garbage_reply_is_host_command_failed(bus: Bus, g: Ganesha) -> None:
    bus.replies["ShowExports"] = HEADER + "   what is this\n"
    with pytest.raises(HostCommandFailed, match="ShowExports"):
        g.list_exports()


def test_connected_clients_from_captured_state(bus: Bus, tmp_path: Path) -> None:
    # captured: now=...870.29, export 101 and the client last active at ...699.38 (171 s)
    g = Ganesha(bus.runner, tmp_path, active_window=600)
    assert g.connected_clients(101) == ["127.0.0.1"]
    assert g.connected_clients(102) == ["127.0.0.1"]  # "*" admits it
    assert g.connected_clients(999) == []  # unknown export
    assert Ganesha(bus.runner, tmp_path, active_window=60).connected_clients(101) == []
    assert Ganesha(bus.runner, tmp_path, active_window=None).connected_clients(101) == [
        "127.0.0.1"]


def test_connected_clients_respects_rules(bus: Bus, tmp_path: Path) -> None:
    bus.replies["DisplayExport"] = lambda argv: DISPLAY[101].replace("127.0.0.1/32",
                                                                     "192.0.2.0/24")
    assert Ganesha(bus.runner, tmp_path).connected_clients(101) == []


@pytest.mark.parametrize("bad", [0, -1, 65536, True])
def test_bad_ids_refused(g: Ganesha, bad: int) -> None:
    with pytest.raises(InvalidInput):
        g.remove_export(bad)
    with pytest.raises(InvalidInput):
        g.connected_clients(bad)


def test_parse_show_exports_flat_flags_of_older_ganesha() -> None:
    flat = HEADER + """   struct {
      uint64 10
      uint64 0
   }
   array [
      struct {
         uint16 7
         string "/old"
         boolean true
         boolean true
         boolean false
         boolean false
         boolean false
         boolean true
         boolean false
         boolean false
         struct {
            uint64 5
            uint64 500000000
         }
      }
   ]
"""
    _, rows = parse_show_exports(flat)
    assert rows[0].protocols_used == {"NFSv3", "MNT", "NFSv41"}
    assert rows[0].last_activity == 5.5


def test_ganesha_5_9_replies_parse_the_same() -> None:
    d = FIXTURES / "5.9"
    _, rows = parse_show_exports((d / "ShowExports.txt").read_text())
    assert [r.export_id for r in rows] == [0, 101]
    assert rows[1].protocols_used == {"NFSv3"} and rows[1].last_activity > 0
    _, clients = parse_show_clients((d / "ShowClients.txt").read_text())
    assert [(c.address, "NFSv3" in c.protocols_used) for c in clients] == [
        ("::ffff:127.0.0.1", True)]
    shown = parse_display_export((d / "DisplayExport-101.txt").read_text())
    assert shown.export_id == 101 and shown.clients == ("127.0.0.1/32",)
    assert shown.path == shown.pseudo and shown.path.endswith("/data/ds1")


def _generic_show_exports(text: str) -> list[tuple[int, str, frozenset[str], float]]:
    from appliance.host import ganesha_replies as ganesha

    real = ganesha._fast_show_exports
    try:
        ganesha._fast_show_exports = lambda _text: None  # type: ignore[assignment]
        return [(r.export_id, r.path, r.protocols_used, r.last_activity)
                for r in parse_show_exports(text)[1]]
    finally:
        ganesha._fast_show_exports = real  # type: ignore[assignment]


@pytest.mark.parametrize("fixture", ["ShowExports.txt", "5.9/ShowExports.txt"])
def test_the_fast_show_exports_reader_agrees_with_the_generic_parser(fixture: str) -> None:
    from appliance.host.ganesha_replies import _fast_show_exports

    text = (FIXTURES / fixture).read_text()
    fast = _fast_show_exports(text)
    assert fast is not None, "the captured layout must take the fast path"
    assert [(r.export_id, r.path, r.protocols_used, r.last_activity) for r in fast[1]] == \
        _generic_show_exports(text)
    # a layout it does not know (a path with a newline in it) falls back, still right
    path = fast[1][1].path
    odd = text.replace(f'"{path}"', f'"{path[:5]}\n{path[5:]}"')
    assert _fast_show_exports(odd) is None
    assert [r.path for r in parse_show_exports(odd)[1]][1] == f"{path[:5]}\n{path[5:]}"


def test_available_is_a_ping_not_a_listing(bus: Bus, g: Ganesha) -> None:
    assert g.available()
    assert bus.runner.calls[-1][-1] == "org.freedesktop.DBus.Peer.Ping"
    bus.replies["Ping"] = (1, NO_SERVICE)
    assert not g.available()


def _show(rows: list[tuple[int, str]]) -> str:
    """A ShowExports reply listing ``rows`` (id, path) after the pseudo root."""
    head, _, _ = SHOW_EXPORTS.partition("   array [\n")
    out = [head + "   array [\n"]
    for eid, path in [(0, "/"), *rows]:
        out.append(f'      struct {{\n         uint16 {eid}\n         string "{path}"\n'
                   "         struct {\n         }\n         struct {\n            uint64 0\n"
                   "            uint64 0\n         }\n      }\n")
    return "".join(out) + "   ]\n"


class LiveSet:
    """ganesha's live exports as the calls change them: AddExport reads the batch file."""

    def __init__(self) -> None:
        self.rows: dict[int, str] = {}
        self.batches: list[int] = []  # blocks per AddExport

    def show(self, _argv: tuple[str, ...]) -> Reply:
        return _show(sorted(self.rows.items()))

    def add(self, argv: tuple[str, ...]) -> Reply:
        text = Path(argv[7].split(":", 1)[1]).read_text()
        ids = [int(x) for x in re.findall(r"Export_Id\s*=\s*(\d+)", text)]
        paths = re.findall(r'\bPath\s*=\s*"([^"]+)"', text)
        self.rows.update(zip(ids, paths, strict=True))
        self.batches.append(len(ids))
        return HEADER + f'   string "{len(ids)} exports added"\n'


def test_many_exports_are_added_in_chunks_each_with_time_for_its_size(
        bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    """Under emulation ganesha adds ~11 exports a second: one AddExport of 500 outlived its
    reply timeout at start-up, so exports go in chunks of ADD_BATCH, and each call waits a
    second per block on top of the reply timeout; one ShowExports checks them all."""
    live = LiveSet()
    bus.replies["ShowExports"] = live.show
    bus.replies["AddExport"] = live.add
    specs = []
    for i in range(120):
        (tmp_path / f"d{i}").mkdir()
        specs.append(spec(200 + i, str(tmp_path / f"d{i}")))
    assert g.add_exports(specs) == {}
    assert live.batches == [50, 50, 20]
    assert sorted(live.rows) == [200 + i for i in range(120)]
    adds = [c for c in bus.runner.calls if c[6].endswith("AddExport")]
    assert [c[3] for c in adds] == ["--reply-timeout=80000"] * 2 + ["--reply-timeout=50000"]
    assert bus.methods().count("ShowExports") == 2


def test_an_add_that_outlives_its_reply_is_waited_for_not_failed(
        bus: Bus, g: Ganesha, tmp_path: Path) -> None:
    """A batch whose reply does not come in time may still be added by ganesha (it
    answers one call at a time): ZDS waits until it answers again and reads what took,
    instead of reporting every export of the batch as not live."""
    live = LiveSet()
    bus.replies["ShowExports"] = live.show

    def slow(argv: tuple[str, ...]) -> Reply:
        live.add(argv)  # ganesha goes on and adds them after the caller gave up
        return (1, "Error org.freedesktop.DBus.Error.NoReply: Did not receive a reply.")

    bus.replies["AddExport"] = slow
    bus.replies["Ping"] = [(1, "Error org.freedesktop.DBus.Error.NoReply: busy"), HEADER]
    specs = []
    for i in range(3):
        (tmp_path / f"d{i}").mkdir()
        specs.append(spec(300 + i, str(tmp_path / f"d{i}")))
    assert g.add_exports(specs) == {}
    assert bus.methods().count("AddExport") == 1, "it re-added what had taken"
    assert bus.methods().count("Ping") == 2

    # down for good: the batch's exports fail as not live, and nothing waits forever
    bus.replies["AddExport"] = (1, NO_SERVICE)
    bus.replies["Ping"] = (1, NO_SERVICE)
    (tmp_path / "late").mkdir()
    with pytest.raises(Unavailable):
        g.add_exports([spec(400, str(tmp_path / "late"))])
