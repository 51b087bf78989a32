// The ZDS console: a client of the public REST API (/api/v1), nothing else.
// Views are rendered from API answers; a readonly token never sees a control that changes
// anything (elements marked data-admin are not rendered for it).
"use strict";
(function () {
  const API = "/api/v1";
  const main = document.getElementById("main");
  const statusBox = document.getElementById("status");
  let timer = null;
  // Each navigation starts a new generation. A view renders only if no navigation came
  // after it started: under a slow API (the appliance under TCG) an overview refresh
  // still in flight would otherwise replace the page the user has just opened.
  let generation = 0;
  const stale = gen => gen !== generation;
  // A form the user has typed into is not rebuilt by a periodic refresh.
  let edited = false;
  main.addEventListener("input", () => { edited = true; });

  // ---- session ---------------------------------------------------------------------
  const session = {
    get token() { return sessionStorage.getItem("zds.token"); },
    get role() { return sessionStorage.getItem("zds.role"); },
    get name() { return sessionStorage.getItem("zds.name"); },
    get admin() { return this.role === "admin"; },
    set(token, who) {
      sessionStorage.setItem("zds.token", token);
      sessionStorage.setItem("zds.role", who.role);
      sessionStorage.setItem("zds.name", who.name);
    },
    clear() { sessionStorage.clear(); },
  };

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error && body.error.message) || ("HTTP " + status));
      this.status = status;
    }
  }

  async function api(method, path, body, raw) {
    const headers = {"Authorization": "Bearer " + session.token};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(API + path, {method, headers,
      body: body === undefined ? undefined : JSON.stringify(body)});
    if (r.status === 401) { session.clear(); location.hash = "#/login"; throw new ApiError(401); }
    if (raw) { if (!r.ok) throw new ApiError(r.status, null); return r; }
    const data = r.status === 204 ? null : await r.json().catch(() => null);
    if (!r.ok) throw new ApiError(r.status, data);
    return data;
  }

  // ---- little DOM helpers ----------------------------------------------------------
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const admin = (...nodes) => (session.admin ? nodes : []);

  function say(text, bad) {
    statusBox.textContent = text;
    statusBox.className = bad ? "bad" : "";
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }
  const num = (v, d = 1) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
  const when = t => (t ? new Date(t * 1000).toLocaleString() : "–");
  function ago(seconds) {  // "12 min ago"; the API gives ages in seconds
    if (seconds === null || seconds === undefined) return "–";
    const s = Math.max(0, seconds);
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} days ago`;
  }
  const labelText = labels => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`)
    .join(", ");

  // What snapshot policies did for a datastore, in a few words: the overview's column and
  // the datastore page's fact. Failure wins over an old success: it is what needs action.
  function protectionText(p) {
    if (!p || !p.policies.length) return "no policy";
    if (p.last_error) return `failing: ${p.last_error}`;
    return p.last_snapshot ? `last snapshot ${ago(p.age)}` : "no snapshot yet";
  }

  function cell(field, value, text) {
    return h("td", {"data-field": field, "data-value": value === null || value === undefined ?
      "" : String(value)}, text === undefined ? String(value ?? "–") : text);
  }

  function table(caption, head, rows, id) {
    return h("table", {id},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, head.map(c => h("th", {scope: "col"}, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", {colspan: head.length}, "none"))));
  }

  function show(title, ...content) {
    clearInterval(timer);
    edited = false;
    // replaceChildren would print a null as the text "null": absent parts are skipped
    main.replaceChildren(h("h1", {}, title), ...content.filter(c => c !== null &&
      c !== undefined && c !== false));
    if (main.dataset.title !== title) main.focus();  // a refresh keeps the reader's place
    main.dataset.title = title;
  }

  function field(label, input, hint) {
    const id = input.id || ("f-" + Math.random().toString(36).slice(2));
    input.id = id;
    return h("p", {class: "field"}, h("label", {for: id}, label), input,
      hint ? h("small", {}, hint) : null);
  }

  function guard(fn) {
    return async ev => {
      if (ev) ev.preventDefault();
      try { await fn(ev); } catch (e) { say(e.message, true); }
    };
  }

  async function waitJob(job, label) {
    while (job.state === "queued" || job.state === "running") {
      say(`${label}: ${job.state} ${Math.round(job.progress * 100)}% ${job.message || ""}`);
      job = await api("GET", `/jobs/${job.id}?wait=5`);
    }
    if (job.state !== "succeeded") throw new Error(`${label}: ${job.state}: ` +
      ((job.error && job.error.message) || ""));
    say(`${label}: done`);
    return job;
  }

  async function blobImage(path, alt) {
    const r = await api("GET", path, undefined, true);
    const url = URL.createObjectURL(await r.blob());
    return h("img", {src: url, alt, class: "plot"});
  }

  // ---- views -----------------------------------------------------------------------
  function loginView() {
    document.getElementById("nav").hidden = true;
    document.getElementById("logout").hidden = true;
    document.getElementById("who").textContent = "";
    const tok = h("input", {type: "password", id: "token", name: "token", required: true,
      autocomplete: "current-password", size: 48});
    const form = h("form", {id: "login", onsubmit: guard(async () => {
      const t = tok.value.trim();
      const r = await fetch(API + "/system/whoami", {headers: {"Authorization": "Bearer " + t}});
      if (!r.ok) throw new Error("This token was not accepted (" + r.status + ").");
      session.set(t, await r.json());
      say("");
      location.hash = "#/";
      route();
    })}, field("API token", tok, "zds token create --role admin|readonly"),
      h("button", {type: "submit"}, "Log in"));
    show("Log in", form);
  }

  async function overview() {
    const gen = generation;
    const [pools, dss, latest, plat, health] = await Promise.all([
      api("GET", "/pools"), api("GET", "/datastores"),
      api("GET", "/metrics/datastores"), api("GET", "/metrics/pools"),
      api("GET", "/system/health").catch(() => null)]);  // 503 while starting: no line
    const lat = Object.fromEntries(latest.map(m => [m.name, m]));
    const pl = Object.fromEntries(plat.map(m => [m.pool, m]));
    const poolRows = pools.map(p => h("tr", {"data-pool": p.name},
      h("th", {scope: "row"}, h("a", {href: `#/pools/${p.name}`}, p.name)),
      cell("health", p.health), cell("size", p.size, bytes(p.size)),
      cell("allocated", p.allocated, bytes(p.allocated)),
      cell("capacity", p.capacity, p.capacity + "%"),
      cell("fragmentation", p.fragmentation, p.fragmentation === null ? "–" :
        p.fragmentation + "%"),
      cell("slog", pl[p.name] ? pl[p.name].slog : null, pl[p.name] ? (pl[p.name].slog ?
        "yes" : "no") : "–"),
      cell("datastores", p.datastores.length)));
    const dsRows = dss.map(d => {
      const m = lat[d.name] || {};
      return h("tr", {"data-datastore": d.name},
        h("th", {scope: "row"}, h("a", {href: `#/datastores/${d.name}`}, d.name)),
        cell("protocol", d.protocol), cell("pool", d.pool),
        cell("size", d.size, bytes(d.size)), cell("used", d.usage.used, bytes(d.usage.used)),
        cell("serving", d.serving, d.serving ? "yes" : "no"),
        h("td", {"data-field": "protection", class: d.protection && d.protection.last_error ?
          "bad" : null, "data-value": d.protection ? d.protection.age : null},
          protectionText(d.protection)),
        cell("read_iops", m.read_iops, num(m.read_iops)),
        cell("write_iops", m.write_iops, num(m.write_iops)),
        cell("read_latency_ms", m.read_latency_ms, num(m.read_latency_ms, 2)),
        cell("write_latency_ms", m.write_latency_ms, num(m.write_latency_ms, 2)));
    });
    if (stale(gen)) return;
    const pair = health && health.cluster;  // absent on a single appliance
    show("Overview",
      ...(pair ? [h("p", {id: "pair", class: pair.role === "unknown" || !pair.peer_online ?
        "bad" : null}, `HA pair: this node ${pair.node} is ${pair.role}` +
        (pair.pools.length ? ` (holds ${pair.pools.join(", ")})` : "") +
        `; peer ${pair.peer || "?"} ${pair.peer_online ? "online" : "offline"}. `,
        h("a", {href: "#/cluster"}, "Cluster"))] : []),
      table("Pools", ["Pool", "Health", "Size", "Allocated", "Full", "Fragmentation", "SLOG",
        "Datastores"], poolRows, "pools"),
      table("Datastores (I/O from the last collection)", ["Datastore", "Protocol", "Pool",
        "Size", "Used", "Serving", "Protection", "Read IOPS", "Write IOPS", "Read ms",
        "Write ms"], dsRows, "datastores"),
      ...admin(h("p", {}, h("a", {href: "#/new", class: "button"}, "New datastore"))));
    timer = setInterval(() => { if (location.hash === "#/" || location.hash === "") refresh(); },
      10000);
  }

  async function refresh() {
    try { await route(true); } catch (e) { say(e.message, true); }
  }

  const RANGES = ["15m", "1h", "6h", "24h", "7d", "30d"];

  async function charts(path, range, spec) {
    const s = await api("GET", `${path}?since=${range}`);
    const figs = spec.map(([title, unit, keys]) => lineChart(title, unit, keys.map(([k, name]) =>
      ({name, points: s.points.map(p => [p.ts, p.values[k] ?? null])}))));
    return h("div", {class: "charts"}, figs);
  }

  function rangePicker(current, onpick) {
    const sel = h("select", {id: "range", onchange: () => onpick(sel.value)},
      RANGES.map(r => h("option", {value: r, selected: r === current}, r)));
    return field("Time range", sel);
  }

  async function poolView(name, range = "1h") {
    const gen = generation;
    const p = await api("GET", `/pools/${name}`);
    const chartBox = await charts(`/pools/${name}/metrics`, range, [
      ["Pool operations", "per s", [["read_ops", "read"], ["write_ops", "write"]]],
      ["Write waits", "ms", [["total_wait_write_ms", "total"], ["disk_wait_write_ms", "disk"],
        ["syncq_wait_write_ms", "sync queue"], ["asyncq_wait_write_ms", "async queue"]]],
      ["Read waits", "ms", [["total_wait_read_ms", "total"], ["disk_wait_read_ms", "disk"]]],
      ["ARC hit ratio", "0-1", [["arc_hit_ratio", "ARC"], ["l2arc_hit_ratio", "L2ARC"]]]]);
    if (stale(gen)) return;
    show(`Pool ${name}`,
      h("dl", {class: "facts"},
        h("dt", {}, "Health"), h("dd", {}, p.health),
        h("dt", {}, "Size"), h("dd", {}, bytes(p.size)),
        h("dt", {}, "Allocated"), h("dd", {}, `${bytes(p.allocated)} (${p.capacity}%)`),
        h("dt", {}, "Fragmentation"), h("dd", {}, p.fragmentation === null ? "–" :
          p.fragmentation + "%"),
        h("dt", {}, "Datastores"), h("dd", {}, p.datastores.join(", ") || "none")),
      rangePicker(range, r => poolView(name, r)), chartBox,
      h("h2", {}, "Protocol comparison"), ...admin(comparisonForm(name)));
    timer = setInterval(() => { if (location.hash === `#/pools/${name}` &&
      !(document.activeElement && document.activeElement.closest("#comparison")))
      poolView(name, range)
      .catch(e => say(e.message, true)); }, 10000);
  }

  // The probe target that reaches a datastore of each protocol over loopback (the API's
  // ProbeTargetName; NFS's two versions share "nfs")
  const PROBE_TARGET = {iscsi: "iscsi", "nvme-tcp": "nvme"};

  // A PUT is the whole desired state: what is not sent back (labels, overrides) is reset.
  function bodyFrom(d, size, labels) {
    const b = {protocol: d.protocol, size: size || d.size, pool: d.pool, thin: d.thin,
      profile: d.profile, labels: labels || d.labels || {}};
    const o = Object.fromEntries(Object.entries(d.overrides || {}).filter(([, v]) =>
      v !== null && v !== undefined));
    if (Object.keys(o).length) b.overrides = o;
    if (d.nfs) b.nfs = {clients: d.nfs.clients};
    if (d.iscsi) b.iscsi = {initiators: d.iscsi.initiators,
      initiator_groups: d.iscsi.initiator_groups};
    if (d.nvme) b.nvme = d.nvme.allow_any_host ? {allow_any_host: true} :
      {hosts: d.nvme.hosts, initiator_groups: d.nvme.initiator_groups};
    return b;
  }

  async function datastoreView(name, range = "1h") {
    const gen = generation;
    const [d, advice, snaps, results] = await Promise.all([
      api("GET", `/datastores/${name}`), api("GET", `/datastores/${name}/advice`),
      api("GET", `/datastores/${name}/snapshots`),
      api("GET", `/probes/results?datastore=${encodeURIComponent(name)}&limit=10`)]);
    const chartBox = await charts(`/datastores/${name}/metrics`, range, [
      ["IOPS", "per s", [["read_iops", "read"], ["write_iops", "write"]]],
      ["Latency", "ms", [["read_latency_ms", "read"], ["write_latency_ms", "write"]]],
      ["Throughput", "MB/s", [["read_mbps", "read"], ["write_mbps", "write"]]]]);
    if (stale(gen)) return;
    const where = d.nfs ? (d.nfs.path || "") : (d.iscsi ? d.iscsi.iqn + " (" + d.iscsi.wwn + ")"
      : "");
    const adviceList = advice.length ? h("ul", {class: "advice"}, advice.map(f =>
      h("li", {class: f.severity, "data-code": f.code}, h("strong", {}, f.title), " — ",
        f.message, h("br"), h("em", {}, "Action: "), f.action,
        h("details", {}, h("summary", {}, "Evidence"),
          h("pre", {}, JSON.stringify(f.evidence, null, 1))))))
      : h("p", {id: "no-advice"}, "No findings: nothing in the last 24 h of measurements " +
        "stands out.");
    const snapRows = snaps.map(s => h("tr", {"data-snapshot": s.name},
      h("th", {scope: "row"}, s.name), h("td", {}, when(s.created)),
      h("td", {"data-field": "age", "data-value": s.age}, ago(s.age)),
      h("td", {"data-field": "policy"}, s.policy || "by hand"),
      h("td", {}, s.held ? "yes" : "no"), h("td", {}, bytes(s.used)),
      h("td", {}, s.clones.join(", ") || "–"),
      ...admin(h("td", {}, cloneForm(name, s.name),
        h("button", {type: "button", onclick: guard(async () => {
          if (!confirm(`Delete snapshot ${s.name}?`)) return;
          await api("DELETE", `/datastores/${name}/snapshots/${s.name}`);
          say(`snapshot ${s.name} deleted`); datastoreView(name, range);
        })}, "Delete")))));
    const resultRows = results.map(r => h("tr", {},
      h("th", {scope: "row"}, h("a", {href: `#/probes/${r.id}`}, r.profile)),
      h("td", {}, r.target.kind || ""), h("td", {}, r.status), h("td", {}, r.started_at),
      h("td", {}, num(r.summary.iops, 0)), h("td", {}, num(r.summary.lat_p99_ms, 2))));
    show(`Datastore ${name}`,
      h("dl", {class: "facts"},
        h("dt", {}, "Protocol"), h("dd", {}, `${d.protocol} (${d.profile})`),
        h("dt", {}, "Pool"), h("dd", {}, d.pool),
        h("dt", {}, "Size"), h("dd", {"data-field": "size", "data-value": d.size},
          `${bytes(d.size)} ${d.thin ? "thin" : "thick"}`),
        h("dt", {}, "Used"), h("dd", {"data-field": "used", "data-value": d.usage.used},
          bytes(d.usage.used)),
        h("dt", {}, "Serving"), h("dd", {}, d.serving ? "yes" : "no"),
        h("dt", {}, "Path / target"), h("dd", {}, where),
        h("dt", {}, "Clients"), h("dd", {}, d.connected_clients.join(", ") || "none"),
        h("dt", {}, "Labels"), h("dd", {"data-field": "labels"}, labelText(d.labels) ||
          "none"),
        h("dt", {}, "Protection"), h("dd", {"data-field": "protection",
          class: d.protection && d.protection.last_error ? "bad" : null},
          protectionText(d.protection),
          d.protection && d.protection.policies.length ?
            ` (${d.protection.policies.join(", ")})` : "")),
      rangePicker(range, r => datastoreView(name, r)), chartBox,
      h("h2", {}, "Advice"), adviceList,
      ...admin(h("h2", {}, "Change"), growForm(d), labelsForm(d), snapshotForm(name),
        h("button", {type: "button", class: "danger", id: "delete", onclick: guard(async () => {
          if (!confirm(`Delete datastore ${name} and its data?`)) return;
          await waitJob(await api("DELETE", `/datastores/${name}?wait=30`), `delete ${name}`);
          location.hash = "#/";
        })}, "Delete datastore")),
      h("h2", {}, "Snapshots"),
      table("Snapshots", ["Name", "Created", "Age", "Policy", "Held", "Used", "Clones",
        ...admin("Actions")], snapRows, "snapshots"),
      h("h2", {}, "Probes"), ...admin(probeForm(d)),
      table("Recent probe results", ["Profile", "Target", "Status", "Started", "IOPS",
        "p99 ms"], resultRows, "probe-results"));
    let busy = false;  // under a slow API a refresh must not start before the last ends
    timer = setInterval(() => {
      const a = document.activeElement;
      const typing = a && ["INPUT", "SELECT", "TEXTAREA", "BUTTON"].includes(a.tagName);
      if (location.hash === `#/datastores/${name}` && !typing && !edited && !busy) {
        busy = true;
        datastoreView(name, range).catch(() => {}).finally(() => { busy = false; });
      }
    }, 30000);
  }

  function growForm(d) {
    if (d.iscsi && d.iscsi.chap_user) return h("p", {}, "Grow a CHAP datastore with the CLI " +
      "(the secret is not shown here).");
    const size = h("input", {type: "text", id: "grow-size", required: true,
      placeholder: "e.g. 200G", size: 10});
    return h("form", {id: "grow", onsubmit: guard(async () => {
      await api("PUT", `/datastores/${d.name}`, bodyFrom(d, size.value.trim()));
      say(`${d.name} grown to ${size.value}`); datastoreView(d.name);
    })}, field("New size", size, "grow only; binary units (G, T)"),
    h("button", {type: "submit"}, "Grow"));
  }

  function labelsForm(d) {
    if (d.iscsi && d.iscsi.chap_user) return h("p", {}, "Change a CHAP datastore's labels " +
      "with the CLI (the secret is not shown here).");
    const box = h("input", {type: "text", id: "labels", size: 30, value: labelText(d.labels),
      placeholder: "protect=gold, tier=ssd"});
    return h("form", {id: "labels-form", onsubmit: guard(async () => {
      const labels = {};
      for (const part of box.value.split(",").map(x => x.trim()).filter(Boolean)) {
        const at = part.indexOf("=");
        if (at < 1) throw new Error(`label ${part}: write key=value`);
        labels[part.slice(0, at).trim()] = part.slice(at + 1).trim();
      }
      await api("PUT", `/datastores/${d.name}`, bodyFrom(d, null, labels));
      say(`${d.name}'s labels set`); datastoreView(d.name);
    })}, field("Labels", box, "key=value, comma-separated; snapshot policies select by them"),
    h("button", {type: "submit"}, "Set labels"));
  }

  function snapshotForm(name) {
    const sn = h("input", {type: "text", id: "snap-name", required: true, size: 20});
    return h("form", {id: "snapshot", onsubmit: guard(async () => {
      await api("POST", `/datastores/${name}/snapshots`, {name: sn.value.trim()});
      say(`snapshot ${sn.value} taken`); datastoreView(name);
    })}, field("Snapshot name", sn), h("button", {type: "submit"}, "Take snapshot"));
  }

  function cloneForm(name, snap) {
    const cn = h("input", {type: "text", required: true, size: 14,
      id: `clone-${snap}`});
    return h("form", {class: "inline", onsubmit: guard(async () => {
      await api("POST", `/datastores/${name}/snapshots/${snap}/clones`, {name: cn.value.trim()});
      say(`clone ${cn.value} made`); location.hash = `#/datastores/${cn.value.trim()}`;
    })}, field(`Clone ${snap} as`, cn), h("button", {type: "submit"}, "Clone"));
  }

  let profileNames = null;  // the catalogue, fetched once: re-renders fill the list at once

  function probeForm(d) {
    const prof = h("select", {id: "probe-profile"});
    const fill = names => prof.replaceChildren(...names.map(n =>
      h("option", {value: n, selected: n === "randread-4k-qd32"}, n)));
    if (profileNames) fill(profileNames);
    else api("GET", "/probes/profiles").then(ps => { profileNames = ps.map(p => p.name);
      fill(profileNames); }).catch(e => say(e.message, true));
    const targets = ["local", PROBE_TARGET[d.protocol] || "nfs"];
    const tgt = h("select", {id: "probe-target"}, targets.map(t => h("option", {value: t}, t)));
    const rt = h("input", {type: "number", id: "probe-runtime", min: 1, max: 3600, value: 10});
    return h("form", {id: "probe", onsubmit: guard(async () => {
      const job = await api("POST", "/probes", {profile: prof.value, datastore: d.name,
        target: tgt.value, overrides: {runtime: Number(rt.value), ramp: 1, size: "64m"}});
      await waitJob(job, `probe ${prof.value}`);
      location.hash = `#/probes/${job.result_id}`;
    })}, field("Profile", prof), field("Target", tgt), field("Runtime (s)", rt),
    h("button", {type: "submit"}, "Run probe"));
  }

  function comparisonForm(pool) {
    const prof = h("select", {id: "comparison-profile"},
      ["randread-4k-qd32", "vm-mixed-4k", "streaming-read", "streaming-write"].map(n =>
        h("option", {value: n}, n)));
    const rt = h("input", {type: "number", id: "comparison-runtime", min: 1, max: 3600,
      value: 10});
    const rounds = h("input", {type: "number", id: "comparison-rounds", min: 1, max: 10,
      value: 1});
    return h("form", {id: "comparison", onsubmit: guard(async () => {
      const job = await api("POST", "/probes/comparisons", {pool, profile: prof.value,
        rounds: Number(rounds.value), overrides: {runtime: Number(rt.value)}});
      await waitJob(job, `protocol comparison ${prof.value}`);
      location.hash = `#/comparisons/${job.comparison_id}`;
    })}, h("p", {}, "The same profile through NFS, iSCSI and NVMe/TCP and straight on a " +
      "dataset and a zvol of this pool, one after the other (docs/probes.md)."),
    field("Profile", prof), field("Runtime per run (s)", rt), field("Rounds", rounds),
    h("button", {type: "submit"}, "Compare protocols"));
  }

  async function comparisonView(id) {
    const gen = generation;
    const c = await api("GET", `/probes/comparisons/${id}`);
    const plot = await blobImage(`/probes/comparisons/${id}/plot`, "protocol comparison");
    if (stale(gen)) return;
    const rows = c.rows.map(r => h("tr", {"data-leg": r.leg},
      h("th", {scope: "row"}, r.leg), h("td", {}, r.baseline || "–"),
      h("td", {}, `${r.runs}${r.failed ? ` (${r.failed} failed)` : ""}`),
      h("td", {}, num(r.iops, 0)), h("td", {}, num(r.mbps, 1)), h("td", {}, num(r.lat_p99_ms, 2)),
      h("td", {}, num(r.cpu_us_per_io, 0)), h("td", {}, num(r.iops_vs_baseline, 2)),
      h("td", {}, num(r.p99_vs_baseline, 2))));
    const runs = c.results.map(r => h("li", {}, h("a", {href: `#/probes/${r.id}`},
      `${r.leg}, round ${r.round + 1}`), `: ${r.status}`, r.error ? ` — ${r.error}` : ""));
    show(`Protocol comparison: ${c.profile} on pool ${c.pool}`,
      h("p", {}, `${c.rounds} round(s)${c.complete ? "" : ", not complete"}; medians over ` +
        "the rounds; CPU is the whole appliance's per I/O."),
      table("Legs", ["Leg", "Against", "Runs", "IOPS", "MB/s", "p99 ms", "CPU µs/IO",
        "IOPS / base", "p99 / base"], rows, "comparison"),
      plot, h("h2", {}, "Runs"), h("ul", {}, runs));
  }

  async function newView() {
    if (!session.admin) { show("New datastore", h("p", {}, "A readonly token cannot create " +
      "datastores.")); return; }
    const gen = generation;
    const pools = await api("GET", "/pools");
    if (stale(gen)) return;
    const name = h("input", {type: "text", id: "ds-name", required: true,
      pattern: "[A-Za-z0-9][A-Za-z0-9_.:-]*"});
    const proto = h("select", {id: "ds-protocol"}, ["nfs3", "nfs41", "iscsi", "nvme-tcp"]
      .map(p => h("option", {value: p}, p)));
    const size = h("input", {type: "text", id: "ds-size", required: true, value: "100G"});
    const pool = h("select", {id: "ds-pool"}, pools.map(p => h("option", {value: p.name},
      p.name)));
    const thin = h("input", {type: "checkbox", id: "ds-thin", checked: true});
    const profile = h("select", {id: "ds-profile"}, ["vmware", "kvm"].map(p =>
      h("option", {value: p}, p)));
    const clients = h("textarea", {id: "ds-clients", rows: 3, cols: 40},
      "192.0.2.0/24 rw");
    const inits = h("textarea", {id: "ds-initiators", rows: 3, cols: 40});
    const hosts = h("textarea", {id: "ds-hosts", rows: 3, cols: 40});
    const form = h("form", {id: "new-datastore", onsubmit: guard(async () => {
      const body = {protocol: proto.value, size: size.value.trim(), pool: pool.value,
        thin: thin.checked, profile: profile.value};
      const lines = t => t.value.split("\n").map(l => l.trim()).filter(Boolean);
      if (proto.value === "iscsi") body.iscsi = {initiators: lines(inits)};
      else if (proto.value === "nvme-tcp") body.nvme = {hosts: lines(hosts)};
      else body.nfs = {clients: lines(clients).map(l => {
        const [match, access] = l.split(/\s+/);
        return {match, access: access === "ro" ? "ro" : "rw"};
      })};
      const d = await api("PUT", `/datastores/${name.value.trim()}`, body);
      say(`datastore ${d.name} created`);
      location.hash = "#/";
    })},
    field("Name", name), field("Protocol", proto, "nfs3 is the safe default for ESXi"),
    field("Size", size, "bytes or 100G / 1.5T"), field("Pool", pool),
    field("Thin", thin), field("Profile", profile),
    field("NFS clients", clients, "one per line: IP, CIDR or host name, then rw or ro"),
    field("iSCSI initiators", inits, "one IQN per line"),
    field("NVMe/TCP hosts", hosts, "one host NQN per line (/etc/nvme/hostnqn)"),
    h("button", {type: "submit"}, "Create datastore"));
    show("New datastore", form);
  }

  async function jobsView() {
    const gen = generation;
    const jobs = (await api("GET", "/jobs?limit=100")).filter(j => j.kind !== "metrics.collect");
    if (stale(gen)) return;
    const rows = jobs.map(j => h("tr", {"data-job": j.id},
      h("td", {}, j.kind), h("td", {}, j.target || "–"), h("td", {}, j.state),
      h("td", {}, h("progress", {max: 1, value: j.progress,
        "aria-label": `${j.kind} progress`}), " ", Math.round(j.progress * 100) + "%"),
      h("td", {}, j.message || (j.error && j.error.message) || ""), h("td", {}, when(j.created)),
      ...admin(h("td", {}, j.state === "queued" || j.state === "running" ?
        h("button", {type: "button", onclick: guard(async () => {
          await api("POST", `/jobs/${j.id}/cancel`); jobsView();
        })}, "Cancel") : ""))));
    show("Jobs", table("Jobs (newest first; metric collections left out)",
      ["Kind", "Target", "State", "Progress", "Message", "Created", ...admin("")], rows, "jobs"));
    timer = setInterval(() => { if (location.hash === "#/jobs") jobsView().catch(() => {}); },
      3000);
  }

  async function probesView() {
    const gen = generation;
    const results = await api("GET", "/probes/results?limit=50");
    if (stale(gen)) return;
    const picked = new Set();
    const rows = results.map(r => h("tr", {},
      h("td", {}, h("input", {type: "checkbox", "aria-label": `select ${r.id}`,
        onchange: ev => { ev.target.checked ? picked.add(r.id) : picked.delete(r.id); }})),
      h("th", {scope: "row"}, h("a", {href: `#/probes/${r.id}`}, r.id)),
      h("td", {}, r.profile), h("td", {}, r.target.datastore || ""),
      h("td", {}, r.target.kind || ""), h("td", {}, r.status), h("td", {}, r.started_at),
      h("td", {}, num(r.summary.iops, 0)), h("td", {}, num(r.summary.lat_p99_ms, 2))));
    const out = h("div", {id: "compare-out"});
    show("Probe results",
      table("Results (newest first)", ["", "Id", "Profile", "Datastore", "Target", "Status",
        "Started", "IOPS", "p99 ms"], rows, "results"),
      h("button", {type: "button", id: "compare", onclick: guard(async () => {
        const [a, b] = [...picked];
        if (!a || !b || picked.size !== 2) throw new Error("select exactly two results");
        const c = await api("GET", `/probes/compare?a=${a}&b=${b}`);
        const rowsC = (c.summary || []).map(v => h("tr", {"data-metric": v.metric},
          h("th", {scope: "row"}, v.metric), h("td", {}, num(v.a, 3)), h("td", {}, num(v.b, 3)),
          h("td", {}, num(v.ratio, 3)), h("td", {}, v.better || "")));
        out.replaceChildren(table(`b / a: ${b} vs ${a}`, ["Metric", "a", "b", "b/a", "Better"],
          rowsC), await blobImage(`/probes/results/${a}/plot?with=${b}`, "overlaid time series"));
      })}, "Compare selected"), out);
  }

  async function probeView(id) {
    const gen = generation;
    const r = await api("GET", `/probes/results/${id}`);
    const plot = await blobImage(`/probes/results/${id}/plot`, `${r.profile} plot`);
    if (stale(gen)) return;
    const rows = Object.entries(r.summary).map(([k, v]) => h("tr", {},
      h("th", {scope: "row"}, k), h("td", {}, num(v, 3))));
    show(`Probe ${r.profile} on ${r.target.datastore || "?"} (${r.target.kind || ""})`,
      h("p", {}, `${r.status}, ${r.started_at} – ${r.ended_at}`, r.error ? " — " + r.error : ""),
      table("Summary", ["Metric", "Value"], rows, "probe-summary"), plot);
  }

  // The HA pair as pacemaker sees it from this node (docs/ha.md): both nodes, which pool
  // each holds, fencing, this node's last takeover; an admin can move a pool.
  function nodeState(n) {
    if (n.unclean) return "lost, not fenced yet";
    if (!n.online) return "offline";
    return n.standby ? "standby" : "online";
  }

  async function clusterView() {
    const gen = generation;
    const c = await api("GET", "/cluster");
    if (stale(gen)) return;
    if (!c.configured) {
      show("Cluster", h("p", {id: "cluster-message"}, c.message),
        h("p", {}, "Two appliances on shared disks keep serving when one dies; " +
          "docs/ha.md says how to make a pair."));
      return;
    }
    const nodeRows = c.nodes.map(n => h("tr", {"data-node": n.name},
      h("th", {scope: "row"}, n.name + (n.name === c.node ? " (this node)" : "")),
      cell("state", nodeState(n)), cell("dc", n.is_dc, n.is_dc ? "yes" : "no"),
      cell("pools", n.pools.join(","), n.pools.join(", ") || "none")));
    const poolRows = c.pools.map(p => h("tr", {"data-pool": p.pool},
      h("th", {scope: "row"}, p.pool), cell("node", p.node, p.node || "nowhere"),
      cell("address", p.address, p.address || "–"), cell("group", p.group)));
    const fenceRows = c.fencing.map(f => h("tr", {"data-target": f.target},
      cell("action", f.action), cell("target", f.target), cell("status", f.status),
      cell("delegate", f.delegate), cell("completed", f.completed, when(f.completed))));
    const t = c.last_takeover;
    const takeover = t ? table("Last takeover by this node", ["Pool", "Finished", "Fenced",
      "Import s", "Adopt s", "Serve s", "Total s"], [h("tr", {"data-pool": t.pool},
      h("th", {scope: "row"}, t.pool), cell("finished", t.finished, when(t.finished)),
      cell("fenced", t.fenced, t.fenced || "none (planned)"),
      ...["import", "adopt", "serve", "total"].map(k =>
        cell(k, t.seconds[k], num(t.seconds[k]))))], "takeover")
      : h("p", {id: "takeover"}, "This node has not taken a pool over.");
    const pool = h("select", {id: "failover-pool", name: "pool"},
      c.pools.map(p => h("option", {value: p.pool}, `${p.pool} (on ${p.node || "nowhere"})`)));
    const holder = c.pools.length ? c.pools[0].node : "";  // offered: the other node
    const node = h("select", {id: "failover-node", name: "node"},
      c.nodes.map(n => h("option", {value: n.name, selected: n.name !== holder && n.online},
        `${n.name} (${nodeState(n)})`)));
    const form = h("form", {id: "failover", onsubmit: guard(async () => {
      const job = await api("POST", "/cluster/failover", {pool: pool.value, node: node.value});
      await waitJob(job, `moving ${pool.value} to ${node.value}`);
      await route(true);
    })}, h("h2", {}, "Move a pool (planned failover)"),
      field("Pool", pool), field("To node", node,
        "its exports and LUNs pause while the other node imports and serves the pool"),
      h("button", {type: "submit"}, "Move"));
    const said = `${c.node}: pacemaker ${c.running ? "answers" : "does not answer"}, ` +
      `quorum ${c.quorum ? "yes" : "no"}, fencing ${c.stonith_enabled ? "on" : "off"}`;
    show("Cluster",
      h("p", {id: "cluster-message", class: c.running && c.stonith_enabled ? null : "bad"},
        said + (c.message ? `. ${c.message}` : "")),
      table("Nodes", ["Node", "State", "DC", "Pools"], nodeRows, "nodes"),
      table("Pools of the pair", ["Pool", "On node", "Service address", "Group"], poolRows,
        "cluster-pools"),
      takeover,
      table("Fencing (pacemaker's history)", ["Action", "Target", "Status", "By",
        "Completed"], fenceRows, "fencing"),
      ...(c.failures.length ? [h("ul", {id: "failures", class: "bad"},
        c.failures.map(f => h("li", {}, f)))] : []),
      ...(c.pools.length && c.running ? admin(form) : []));
    timer = setInterval(() => { if (location.hash === "#/cluster") refresh(); }, 10000);
  }

  // ---- routing -----------------------------------------------------------------------
  async function route(quiet) {
    generation += 1;
    if (!session.token) { loginView(); return; }
    document.getElementById("nav").hidden = false;
    document.getElementById("logout").hidden = false;
    document.getElementById("who").textContent = `${session.name} (${session.role})`;
    for (const a of document.querySelectorAll("[data-admin]")) a.hidden = !session.admin;
    const hash = location.hash || "#/";
    const [, view, arg] = hash.split("/");
    if (!quiet) say("");
    if (view === "login") return loginView();
    if (view === "" || view === undefined) return overview();
    if (view === "pools" && arg) return poolView(decodeURIComponent(arg));
    if (view === "datastores" && arg) return datastoreView(decodeURIComponent(arg));
    if (view === "new") return newView();
    if (view === "jobs") return jobsView();
    if (view === "cluster") return clusterView();
    if (view === "probes" && arg) return probeView(decodeURIComponent(arg));
    if (view === "probes") return probesView();
    if (view === "comparisons" && arg) return comparisonView(decodeURIComponent(arg));
    show("Not found", h("p", {}, "No such page. ", h("a", {href: "#/"}, "Overview")));
  }

  document.getElementById("logout").addEventListener("click", () => {
    session.clear(); location.hash = "#/login"; loginView();
  });
  window.addEventListener("hashchange", () => route().catch(e => say(e.message, true)));
  route().catch(e => say(e.message, true));
})();
