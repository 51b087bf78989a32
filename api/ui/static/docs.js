// The API reference at /docs: /openapi.json (the document this API serves) rendered as
// tables, by this file alone: nothing is loaded from anywhere else, and the page runs under
// the console's Content-Security-Policy. Text from the document is only ever put into
// text nodes.
"use strict";
(function () {
  const main = document.getElementById("main");
  const toc = document.getElementById("toc");
  const statusBox = document.getElementById("status");
  const METHODS = ["get", "put", "post", "patch", "delete", "head", "options"];

  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined && v !== false) e.setAttribute(k, String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false || c === "") continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const anchor = s => String(s).replace(/[^A-Za-z0-9_-]/g, "-");

  function paragraphs(text) {
    return h("div", {class: "desc"}, String(text || "").split(/\n\s*\n/)
      .filter(p => p.trim()).map(p => h("p", {}, p.trim().replace(/\s*\n\s*/g, " "))));
  }

  function joined(parts, sep) {
    return parts.flatMap((p, i) => (i ? [sep, ...p] : p));
  }

  // A schema in a few words, the named ones linked: "list of JobOut", "string | null".
  function typeOf(s) {
    if (!s) return ["any"];
    if (s.$ref) {
      const name = s.$ref.split("/").pop();
      return [h("a", {href: "#schema-" + anchor(name)}, name)];
    }
    if (s.anyOf || s.oneOf) return joined((s.anyOf || s.oneOf).map(typeOf), " | ");
    if (s.allOf) return joined(s.allOf.map(typeOf), " & ");
    if (s.enum) return [s.enum.map(v => JSON.stringify(v)).join(" | ")];
    if ("const" in s) return [JSON.stringify(s.const)];
    if (s.type === "array") return ["list of ", ...typeOf(s.items)];
    if (s.type === "object" && s.additionalProperties && typeof s.additionalProperties === "object") {
      return ["map of ", ...typeOf(s.additionalProperties)];
    }
    const t = Array.isArray(s.type) ? s.type.join(" | ") : (s.type || "any");
    return [s.format ? `${t} (${s.format})` : t];
  }

  // Bounds and defaults: "required; ≥ 0, ≤ 600, default 0".
  function notes(s, required) {
    s = s || {};
    const bits = [];
    if (s.minimum !== undefined) bits.push(`≥ ${s.minimum}`);
    if (s.exclusiveMinimum !== undefined) bits.push(`> ${s.exclusiveMinimum}`);
    if (s.maximum !== undefined) bits.push(`≤ ${s.maximum}`);
    if (s.exclusiveMaximum !== undefined) bits.push(`< ${s.exclusiveMaximum}`);
    if (s.minLength !== undefined) bits.push(`length ≥ ${s.minLength}`);
    if (s.maxLength !== undefined) bits.push(`length ≤ ${s.maxLength}`);
    if (s.minItems !== undefined) bits.push(`items ≥ ${s.minItems}`);
    if (s.maxItems !== undefined) bits.push(`items ≤ ${s.maxItems}`);
    if (s.pattern) bits.push(`pattern ${s.pattern}`);
    if (s.default !== undefined) bits.push(`default ${JSON.stringify(s.default)}`);
    return [required ? "required" : "", bits.join(", ")].filter(Boolean).join("; ");
  }

  function table(head, rows) {
    return h("table", {},
      h("thead", {}, h("tr", {}, head.map(c => h("th", {scope: "col"}, c)))),
      h("tbody", {}, rows));
  }

  function operation(path, method, op) {
    const parts = [h("h3", {}, h("span", {class: "method " + method}, method.toUpperCase()),
      h("code", {}, path))];
    if (op.summary) parts.push(h("p", {}, h("strong", {}, op.summary)));
    if (op.description) parts.push(paragraphs(op.description));
    parts.push(h("p", {class: "lock"}, op.security && op.security.length ?
      "Needs a token: Authorization: Bearer zds_…" : "No token needed."));
    const params = op.parameters || [];
    if (params.length) {
      parts.push(table(["parameter", "in", "type", "", "description"], params.map(p =>
        h("tr", {}, h("td", {}, h("code", {}, p.name)), h("td", {}, p.in),
          h("td", {}, h("code", {class: "type"}, typeOf(p.schema))),
          h("td", {}, notes(p.schema, p.required)), h("td", {}, p.description || "")))));
    }
    if (op.requestBody) {
      const content = Object.entries(op.requestBody.content || {});
      parts.push(h("p", {}, "Body",
        op.requestBody.required ? " (required)" : "", ": ",
        joined(content.map(([type, c]) => [h("code", {}, type), " ",
          h("code", {class: "type"}, typeOf(c.schema))]), "; ")));
    }
    parts.push(table(["status", "answer", "when"], Object.entries(op.responses || {})
      .map(([status, r]) => h("tr", {}, h("td", {}, status),
        h("td", {}, h("code", {class: "type"}, joined(Object.entries(r.content || {})
          .map(([type, c]) => (c.schema ? typeOf(c.schema) : [type])), "; "))),
        h("td", {}, r.description || "")))));
    return h("section", {class: "op", id: "op-" + anchor(op.operationId || method + path)},
      parts);
  }

  function schema(name, s) {
    const required = new Set(s.required || []);
    const props = Object.entries(s.properties || {});
    return h("section", {class: "op", id: "schema-" + anchor(name)}, h("h3", {}, name),
      s.description ? paragraphs(s.description) : null,
      props.length ? table(["field", "type", "", "description"], props.map(([k, p]) =>
        h("tr", {}, h("td", {}, h("code", {}, k)),
          h("td", {}, h("code", {class: "type"}, typeOf(p))),
          h("td", {}, notes(p, required.has(k))), h("td", {}, p.description || ""))))
        : h("p", {}, h("code", {class: "type"}, typeOf(s))));
  }

  async function render() {
    const r = await fetch("/openapi.json");
    if (!r.ok) throw new Error(`GET /openapi.json: HTTP ${r.status}`);
    const doc = await r.json();
    document.title = `${doc.info.title} ${doc.info.version}: REST API`;
    const byTag = new Map();
    for (const [path, ops] of Object.entries(doc.paths || {})) {
      for (const m of METHODS.filter(m => ops[m])) {
        const tag = (ops[m].tags || ["other"])[0];
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push(operation(path, m, ops[m]));
      }
    }
    const content = [h("h1", {}, `${doc.info.title} ${doc.info.version}`),
      paragraphs(doc.info.description),
      h("p", {}, "The document itself: ", h("a", {href: "/openapi.json"}, "/openapi.json"),
        ". Try calls from a shell with curl, or use the console (", h("a", {href: "/ui"}, "/ui"),
        ").")];
    const contents = [];
    for (const [tag, sections] of byTag) {
      content.push(h("h2", {id: "tag-" + anchor(tag)}, tag), sections);
      contents.push(h("h2", {}, h("a", {href: "#tag-" + anchor(tag)}, tag)),
        h("ul", {}, sections.map(s => h("li", {}, h("a", {href: "#" + s.id},
          s.querySelector("h3").textContent.replace(/^(\w+)/, "$1 "))))));
    }
    const schemas = Object.entries((doc.components || {}).schemas || {});
    content.push(h("h2", {id: "schemas"}, "Schemas"), schemas.map(([n, s]) => schema(n, s)));
    contents.push(h("h2", {}, h("a", {href: "#schemas"}, `Schemas (${schemas.length})`)));
    main.replaceChildren(...content.flat(Infinity));
    toc.replaceChildren(...contents);
    statusBox.textContent = "";
    const target = location.hash && document.getElementById(location.hash.slice(1));
    if (target) target.scrollIntoView();
  }

  render().catch(e => {
    statusBox.textContent = e.message;
    statusBox.className = "bad";
  });
})();
