"""The web console in a real headless Chromium against the API on fakes (uvicorn on
127.0.0.1, like `zds demo`): log in, see the pool, create an NFS datastore through the
form, see it listed with the API's numbers, run a probe and see its plot, compare two
results; a readonly token finds no control that changes anything. Screenshots are saved
(tests/browser.py says where)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from api.app import create_app
from appliance.demo import demo_engine
from appliance.engine import Engine
from appliance.fake_hosts import fake_hosts
from appliance.host.cluster import FenceEvent
from appliance.host.fakes.cluster import FakeCluster
from appliance.host.fio import FakeFio
from appliance.settings import Settings
from tests import browser
from tests.browser import css, wait_for

pytestmark = pytest.mark.integration

if (why := browser.available()) is not None:
    pytest.skip(why, allow_module_level=True)

FIX = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "fio"
ADMIN_ONLY = ("form#new-datastore", "form#grow", "form#labels-form", "form#snapshot",
              "form#probe", "form#comparison", "form#failover", "#delete", "button.danger")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.admin = engine.tokens.create("browser-admin", "admin")
        self.readonly = engine.tokens.create("browser-ro", "readonly")
        config = uvicorn.Config(create_app(engine, start=False), host="127.0.0.1",
                                port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, self.base + "/api/v1" + path, timeout=30,
                          headers={"Authorization": f"Bearer {self.admin}"}, **kw)
        assert r.status_code < 300, r.text
        return r.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    engine = demo_engine(Path(tmp_path_factory.mktemp("console")))
    probes = engine.ctx.hosts.probes
    assert probes is not None and isinstance(probes.fio, FakeFio)
    # the fake fio answers with a captured vm-mixed-4k run
    probes.fio.json_text = (FIX / "vm-mixed-4k.json").read_text()
    probes.fio.logs = {p.name: p.read_text() for p in (FIX / "vm-mixed-4k-logs").iterdir()}
    s = Served(engine)
    s.thread.start()
    wait_for(lambda: s.server.started, what="uvicorn")
    yield s
    s.server.should_exit = True
    s.thread.join(timeout=10)
    engine.close()


def test_admin_console(served: Served) -> None:
    s = served
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        assert "tank" in css(d, "table#pools")[0].text
        browser.screenshot(d, "console-overview-empty")

        # create an NFS datastore through the form
        d.get(s.base + "/ui#/new")
        wait_for(lambda: css(d, "form#new-datastore"), what="the form")
        css(d, "#ds-name")[0].send_keys("web-nfs01")
        size = css(d, "#ds-size")[0]
        size.clear()
        size.send_keys("20G")
        clients = css(d, "#ds-clients")[0]
        clients.clear()
        clients.send_keys("127.0.0.1 rw")
        css(d, "form#new-datastore button[type=submit]")[0].click()
        wait_for(lambda: css(d, 'tr[data-datastore="web-nfs01"]'), what="the new row")
        ds = s.api("GET", "/datastores/web-nfs01")
        assert ds["protocol"] == "nfs3" and ds["nfs"]["clients"] == [
            {"match": "127.0.0.1", "access": "rw"}]

        # two collections: the listed numbers must be the API's
        s.engine.metrics.collect()
        time.sleep(1.1)
        s.engine.metrics.collect()
        d.refresh()
        wait_for(lambda: css(d, 'tr[data-datastore="web-nfs01"] td[data-field=read_iops]'
                                '[data-value]:not([data-value=""])'), what="IOPS")
        latest = {m["name"]: m for m in s.api("GET", "/metrics/datastores")}
        api_ds = {x["name"]: x for x in s.api("GET", "/datastores")}
        cells = {c.get_attribute("data-field"): c.get_attribute("data-value") or ""
                 for c in css(d, 'tr[data-datastore="web-nfs01"] td')}
        assert float(cells["read_iops"]) == latest["web-nfs01"]["read_iops"] > 0
        assert float(cells["write_latency_ms"]) == latest["web-nfs01"]["write_latency_ms"]
        assert int(cells["size"]) == api_ds["web-nfs01"]["size"] == 20 << 30
        assert int(cells["used"]) == api_ds["web-nfs01"]["usage"]["used"]
        browser.screenshot(d, "console-overview")

        # the datastore page: charts from the history, advice; run a probe, see its plot
        d.get(s.base + "/ui#/datastores/web-nfs01")
        wait_for(lambda: css(d, "figure.chart svg path[data-series=read]"), what="the chart")
        browser.screenshot(d, "console-datastore")
        for _ in range(2):
            wait_for(lambda: css(d, '#probe-profile option[value="vm-mixed-4k"]'),
                     what="profiles")[0].click()
            css(d, "#probe-runtime")[0].clear()
            css(d, "#probe-runtime")[0].send_keys("2")
            css(d, "form#probe button[type=submit]")[0].click()
            img = wait_for(lambda: css(d, "img.plot"), timeout=60, what="the probe's plot")[0]
            wait_for(lambda i=img: d.execute_script(  # type: ignore[misc]
                "return arguments[0].naturalWidth", i) > 100, what="a drawn plot")
            browser.screenshot(d, "console-probe")
            d.get(s.base + "/ui#/datastores/web-nfs01")
            wait_for(lambda: css(d, "form#probe"), what="the datastore page")

        # compare the two results
        d.get(s.base + "/ui#/probes")
        boxes = wait_for(lambda: css(d, "table#results input[type=checkbox]"), what="results")
        boxes[0].click()
        boxes[1].click()
        css(d, "#compare")[0].click()
        wait_for(lambda: css(d, "#compare-out img.plot"), what="the comparison")
        iops = css(d, '#compare-out tr[data-metric="iops"] td')
        assert iops and iops[2].text == "1.000", [c.text for c in iops]  # same fake fio run
        browser.screenshot(d, "console-compare")

        # jobs with progress
        d.get(s.base + "/ui#/jobs")
        wait_for(lambda: css(d, "table#jobs progress"), what="jobs")
        assert not [r for r in css(d, "table#jobs tbody tr") if "metrics.collect" in r.text]
        assert browser.external_requests(d, s.base) == []


def test_readonly_console_has_no_mutating_controls(served: Served) -> None:
    s = served
    s.api("PUT", "/datastores/web-ro", json={"protocol": "nfs3", "size": "1G",
                                             "nfs": {"clients": [{"match": "127.0.0.1"}]}})
    with browser.chromium() as d:
        browser.login(d, s.base, s.readonly)
        assert "(readonly)" in css(d, "#who")[0].text
        assert not [a for a in css(d, "nav a") if a.is_displayed() and "New" in a.text]
        for page, ready in (("#/", "table#datastores"),
                            ("#/datastores/web-ro", "figure.chart"),
                            ("#/pools/tank", "figure.chart"),
                            ("#/jobs", "table#jobs"), ("#/probes", "table#results")):
            d.get(s.base + "/ui" + page)
            wait_for(lambda r=ready: css(d, r), what=page)  # type: ignore[misc]
            for sel in ADMIN_ONLY:
                assert not css(d, sel), f"{page}: {sel} shown to a readonly token"
            if page.startswith("#/datastores/"):
                browser.screenshot(d, "console-readonly")
            assert not [b for b in css(d, "main button") if b.text in ("Delete", "Cancel",
                                                                      "Clone")], page


def test_grow_snapshot_clone_delete_through_the_console(served: Served) -> None:
    s = served
    s.api("PUT", "/datastores/web-life", json={"protocol": "nfs3", "size": "1G",
                                               "nfs": {"clients": [{"match": "127.0.0.1"}]}})
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        d.get(s.base + "/ui#/datastores/web-life")
        wait_for(lambda: css(d, "form#grow"), what="the grow form")
        css(d, "#grow-size")[0].send_keys("3G")
        css(d, "form#grow button[type=submit]")[0].click()
        wait_for(lambda: s.api("GET", "/datastores/web-life")["size"] == 3 << 30, what="grown")
        assert s.api("GET", "/datastores/web-life")["nfs"]["clients"] == [
            {"match": "127.0.0.1", "access": "rw"}], "growing kept the access list"

        wait_for(lambda: css(d, "#snap-name"), what="the snapshot form")[0].send_keys("before")
        css(d, "form#snapshot button[type=submit]")[0].click()
        wait_for(lambda: css(d, "#clone-before"), what="the snapshot row")[0].send_keys(
            "web-life-copy")
        css(d, "form.inline button[type=submit]")[0].click()
        wait_for(lambda: "web-life-copy" in {x["name"] for x in s.api("GET", "/datastores")},
                 what="the clone")
        assert s.api("GET", "/datastores/web-life-copy")["origin"].endswith("@before")

        d.get(s.base + "/ui#/datastores/web-life-copy")
        # the copy's own page: until it renders, #delete is web-life's, about to go stale
        wait_for(lambda: css(d, 'main[data-title="Datastore web-life-copy"] #delete'),
                 what="the delete button")[0].click()
        d.switch_to.alert.accept()
        wait_for(lambda: "web-life-copy" not in {x["name"] for x in s.api("GET", "/datastores")},
                 timeout=60, what="the clone deleted")
        wait_for(lambda: css(d, "table#pools"), what="back on the overview")


def test_protection_and_labels_through_the_console(served: Served) -> None:
    """The console shows what snapshot policies do (the overview's column, the datastore
    page's fact, each snapshot's policy and age), and labels set on the page put a
    datastore into a label-selected policy without resetting its overrides; growing keeps
    the labels (the console sends back the whole desired state)."""
    s = served
    s.api("PUT", "/datastores/web-prot", json={
        "protocol": "nfs3", "size": "1G", "overrides": {"sync": "always"},
        "nfs": {"clients": [{"match": "127.0.0.1"}]}})
    s.api("PUT", "/snapshot-policies/web-gold", json={
        "schedule": {"every": "1h"}, "retention": {"hourly": 3},
        "datastores": {"labels": {"protect": "gold"}}})
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        d.get(s.base + "/ui#/datastores/web-prot")
        fact = wait_for(lambda: css(d, 'dd[data-field="protection"]'), what="protection")[0]
        assert fact.text == "no policy"

        box = wait_for(lambda: css(d, "#labels"), what="the labels form")[0]
        box.send_keys("protect=gold, tier = ssd")
        css(d, "form#labels-form button[type=submit]")[0].click()
        wait_for(lambda: s.api("GET", "/datastores/web-prot")["labels"] == {
            "protect": "gold", "tier": "ssd"}, what="the labels set")
        view = s.api("GET", "/datastores/web-prot")
        assert view["overrides"]["sync"] == "always", "setting labels reset an override"
        assert view["protection"]["policies"] == ["web-gold"]

        job = s.api("POST", "/snapshot-policies/web-gold/run", params={"wait": 30})
        assert job["state"] == "succeeded", job
        d.get(s.base + "/ui#/jobs")  # leave and come back: a fresh render
        wait_for(lambda: css(d, "table#jobs"), what="the jobs page")
        d.get(s.base + "/ui#/datastores/web-prot")
        wait_for(lambda: css(d, 'main[data-title="Datastore web-prot"] '
                                'dd[data-field="protection"]'), what="the page")
        fact = css(d, 'dd[data-field="protection"]')[0]
        assert fact.text.startswith("last snapshot ") and "(web-gold)" in fact.text, fact.text
        rows = css(d, "table#snapshots tbody tr")
        assert [r.find_element("css selector", 'td[data-field="policy"]').text
                for r in rows] == ["web-gold"], [r.text for r in rows]
        age = rows[0].find_element("css selector", 'td[data-field="age"]')
        assert age.text.endswith(" ago") and float(age.get_attribute("data-value") or -1) >= 0
        browser.screenshot(d, "console-protection")

        # growing through the page keeps the labels, so the policy still covers it
        css(d, "#grow-size")[0].send_keys("2G")
        css(d, "form#grow button[type=submit]")[0].click()
        wait_for(lambda: s.api("GET", "/datastores/web-prot")["size"] == 2 << 30, what="grown")
        view = s.api("GET", "/datastores/web-prot")
        assert view["labels"] == {"protect": "gold", "tier": "ssd"}, "growing dropped labels"
        assert view["protection"]["policies"] == ["web-gold"]

        d.get(s.base + "/ui#/")
        cell = wait_for(lambda: css(d, 'tr[data-datastore="web-prot"] '
                                       'td[data-field="protection"]'), what="the column")[0]
        assert cell.text.startswith("last snapshot "), cell.text
        other = css(d, 'tr[data-datastore="web-ro"] td[data-field="protection"]')
        assert not other or other[0].text == "no policy"
    r = httpx.delete(s.base + "/api/v1/snapshot-policies/web-gold", timeout=30,
                     headers={"Authorization": f"Bearer {s.admin}"})
    assert r.status_code < 300, r.text


HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"


def test_nvme_datastore_and_protocol_comparison_through_the_console(served: Served) -> None:
    """An NVMe/TCP datastore made with the form keeps its host NQNs when the page grows
    it (a PUT is the whole desired state), its probe form offers the nvme target, and the
    pool page runs a protocol comparison and shows its table and chart."""
    s = served
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        d.get(s.base + "/ui#/new")
        wait_for(lambda: css(d, "form#new-datastore"), what="the form")
        css(d, "#ds-name")[0].send_keys("web-nvme")
        css(d, '#ds-protocol option[value="nvme-tcp"]')[0].click()
        css(d, "#ds-hosts")[0].send_keys(HOST_NQN)
        css(d, "form#new-datastore button[type=submit]")[0].click()
        wait_for(lambda: css(d, 'tr[data-datastore="web-nvme"]'), what="the new row")
        assert s.api("GET", "/datastores/web-nvme")["nvme"]["hosts"] == [HOST_NQN]

        d.get(s.base + "/ui#/datastores/web-nvme")
        wait_for(lambda: css(d, "form#grow"), what="the grow form")
        assert [o.get_attribute("value") for o in css(d, "#probe-target option")] == [
            "local", "nvme"]
        css(d, "#grow-size")[0].send_keys("200G")
        css(d, "form#grow button[type=submit]")[0].click()
        wait_for(lambda: s.api("GET", "/datastores/web-nvme")["size"] == 200 << 30,
                 what="grown")
        assert s.api("GET", "/datastores/web-nvme")["nvme"]["hosts"] == [HOST_NQN], \
            "growing through the console dropped the host NQNs"

        d.get(s.base + "/ui#/pools/tank")
        wait_for(lambda: css(d, "form#comparison"), what="the comparison form")
        css(d, '#comparison-profile option[value="vm-mixed-4k"]')[0].click()
        css(d, "#comparison-runtime")[0].clear()
        css(d, "#comparison-runtime")[0].send_keys("1")
        css(d, "form#comparison button[type=submit]")[0].click()
        rows = wait_for(lambda: css(d, "table#comparison tbody tr"), timeout=120,
                        what="the comparison's table")
        legs = [r.get_attribute("data-leg") for r in rows]
        assert legs == ["dataset", "nfs3", "nfs41", "zvol", "iscsi", "nvme-tcp"], legs
        img = wait_for(lambda: css(d, "img.plot"), what="the comparison's chart")[0]
        wait_for(lambda: d.execute_script("return arguments[0].naturalWidth", img) > 100,
                 what="a drawn chart")
        cid = d.current_url.rsplit("/", 1)[1]
        api_rows = s.api("GET", f"/probes/comparisons/{cid}")["rows"]
        shown = {r.get_attribute("data-leg"): r.find_elements("css selector", "td")[2].text
                 for r in rows}
        assert shown == {r["leg"]: f"{r['iops']:.0f}" for r in api_rows}  # the API's IOPS
        browser.screenshot(d, "console-protocol-comparison")


def test_a_slow_page_does_not_replace_the_page_opened_after_it(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the appliance under TCG the overview's answers take seconds: one still in flight
    when the user opens the new-datastore page must not replace that page when it lands
    (it did: the form appeared, then the overview came back over it). A form typed into
    is not rebuilt by the datastore page's refresh either."""
    s = served
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        slow_list = s.engine.datastores.list

        def slow(*args: Any, **kw: Any) -> Any:
            time.sleep(3)
            return slow_list(*args, **kw)

        monkeypatch.setattr(s.engine.datastores, "list", slow)
        d.get(s.base + "/ui#/jobs")
        wait_for(lambda: css(d, "table#jobs"), what="the jobs page")
        d.execute_script("location.hash = '#/'; setTimeout(() => "
                         "{ location.hash = '#/new'; }, 300);")
        wait_for(lambda: css(d, "form#new-datastore"), what="the form")
        time.sleep(4)  # the overview's list answers meanwhile
        assert css(d, "form#new-datastore"), "the late overview replaced the form"
        assert d.find_element("css selector", "main h1").text == "New datastore"
        monkeypatch.undo()

        name = css(d, "#ds-name")[0]
        name.send_keys("typed-not-lost")
        d.execute_script("document.activeElement.blur();")
        # the overview's refresh timer (10 s) must not be running on this page
        time.sleep(11)
        assert css(d, "#ds-name")[0].get_attribute("value") == "typed-not-lost"


def test_api_reference_renders_the_document_with_nothing_from_elsewhere(
        served: Served) -> None:
    """/docs (our page, not Swagger UI from a CDN) shows every operation and schema of
    /openapi.json under the console's CSP, with nothing loaded from elsewhere."""
    s = served
    doc = httpx.get(s.base + "/openapi.json", timeout=30).json()
    operations = sum(len([m for m in ops if m in ("get", "put", "post", "patch", "delete")])
                     for ops in doc["paths"].values())
    with browser.chromium() as d:
        d.get(s.base + "/docs#schema-HealthSummaryOut")
        wait_for(lambda: css(d, "section.op[id^=op-]"), what="the operations")
        assert len(css(d, "section.op[id^=op-]")) == operations
        assert len(css(d, "section.op[id^=schema-]")) == len(doc["components"]["schemas"])
        assert "GET /api/v1/jobs/{job_id}" in css(d, "#toc")[0].text
        health = css(d, "#op-health_api_v1_system_health_get")[0].get_attribute("textContent") \
            or ""
        assert "HealthSummaryOut" in health and "No token needed." in health
        # the script ran (above) and the style sheets applied under the CSP
        assert d.execute_script("return getComputedStyle(document.querySelector('header'))"
                                ".backgroundColor") == "rgb(16, 42, 67)"
        assert d.execute_script("return getComputedStyle(document.getElementById('toc'))"
                                ".position") == "sticky"
        assert browser.external_requests(d, s.base) == []
        browser.screenshot(d, "api-reference")


def test_a_single_appliance_says_it_is_not_in_a_pair(served: Served) -> None:
    s = served
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        assert not css(d, "#pair")  # the overview has no pair line...
        assert "null" not in css(d, "main")[0].text  # ...and no trace of a missing one
        d.get(s.base + "/ui#/cluster")
        said = wait_for(lambda: css(d, "#cluster-message"), what="the cluster page")[0].text
        assert "not in an HA pair" in said
        assert not css(d, "form#failover") and not css(d, "table#nodes")


@pytest.fixture
def pair_served(tmp_path: Path) -> Iterator[tuple[Served, FakeCluster]]:
    """ha-a of a pair holding tank (its fake pacemaker); ha-b fenced once, and ha-a's
    agent took the pool since (so there is a last takeover to show)."""
    hosts = fake_hosts("tank", hostname="ha-a")
    cluster = FakeCluster.pair("ha-a", "ha-b", {"tank": "ha-a"}, address="10.96.0.50")
    cluster.fencing.append(FenceEvent("reboot", "ha-b", "success", "ha-a", "ha-a",
                                      time.time() - 60))
    hosts.cluster = cluster
    engine = Engine.create(Settings().with_state_dir(tmp_path), hosts.adapters())
    engine.start()
    s = Served(engine)
    s.thread.start()
    wait_for(lambda: s.server.started, what="uvicorn")
    job = s.api("POST", "/cluster/pools/tank/take", params={"wait": 30})
    assert job["state"] == "succeeded", job
    engine.reconciler.check()  # what the watcher does: health's check, pacemaker's state
    engine.cluster.state(max_age=0)
    yield s, cluster
    s.server.should_exit = True
    s.thread.join(timeout=10)
    engine.close()


def test_the_pair_in_the_console_and_a_planned_move(
        pair_served: tuple[Served, FakeCluster]) -> None:
    """Both nodes, who holds the pool and at which address, the fencing history and the
    last takeover, as GET /cluster says; an admin moves the pool to the other node
    through the form (pacemaker is asked, the pin cleared); a readonly token sees the
    pair but no form."""
    s, cluster = pair_served
    with browser.chromium() as d:
        browser.login(d, s.base, s.admin)
        pair = wait_for(lambda: css(d, "#pair"), what="the pair line")[0].text
        assert "this node ha-a is active (holds tank)" in pair and "ha-b online" in pair
        d.get(s.base + "/ui#/cluster")
        wait_for(lambda: css(d, 'table#nodes tr[data-node="ha-b"]'), what="the nodes")
        api = s.api("GET", "/cluster")
        cells = {c.get_attribute("data-field"): c.get_attribute("data-value") or ""
                 for c in css(d, 'table#cluster-pools tr[data-pool="tank"] td')}
        assert cells["node"] == api["pools"][0]["node"] == "ha-a"
        assert cells["address"] == "10.96.0.50"
        assert "(this node)" in css(d, 'tr[data-node="ha-a"] th')[0].text
        took = {c.get_attribute("data-field"): c.get_attribute("data-value") or ""
                for c in css(d, 'table#takeover tr[data-pool="tank"] td')}
        assert float(took["total"]) == api["last_takeover"]["seconds"]["total"]
        assert css(d, 'table#fencing tr[data-target="ha-b"] td[data-field=status]')[0] \
            .text == "success"
        browser.screenshot(d, "console-cluster")

        css(d, '#failover-node option[value="ha-b"]')[0].click()
        css(d, "form#failover button[type=submit]")[0].click()
        wait_for(lambda: css(d, 'table#cluster-pools tr[data-pool="tank"] '
                                'td[data-field=node][data-value="ha-b"]'), what="the move")
        assert cluster.moves == [("zds-tank", "ha-b"), ("zds-tank", "")]
        assert "done" in css(d, "#status")[0].text

        browser.login(d, s.base, s.readonly)
        d.get(s.base + "/ui#/cluster")
        wait_for(lambda: css(d, "table#nodes"), what="the cluster page, readonly")
        assert not css(d, "form#failover")

