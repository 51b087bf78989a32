// A small SVG line chart (no library): time on x, one or more series on y.
// lineChart(title, unit, series) -> <figure>; series: [{name, points: [[unixTime, value|null]]}]
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700"];

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return v >= 10 ? v.toFixed(0) : v.toFixed(2).replace(/\.?0+$/, "");
  }

  function clock(t) {
    const d = new Date(t * 1000);
    return d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
  }

  window.lineChart = function (title, unit, series) {
    const W = 560, H = 200, L = 48, R = 24, T = 10, B = 28;
    const pts = series.flatMap(s => s.points.filter(p => p[1] !== null));
    const fig = document.createElement("figure");
    fig.className = "chart";
    const cap = document.createElement("figcaption");
    cap.textContent = title + (unit ? " (" + unit + ")" : "");
    fig.appendChild(cap);
    const last = series.map(s => {
      const v = s.points.filter(p => p[1] !== null);
      return s.name + " " + (v.length ? fmt(v[v.length - 1][1]) : "no data");
    }).join(", ");
    const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `${title}: ${pts.length ? "latest " + last : "no samples yet"}`});
    fig.appendChild(svg);
    if (!pts.length) {
      svg.appendChild(el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "muted"},
        "no samples yet"));
      return fig;
    }
    const t0 = Math.min(...pts.map(p => p[0])), t1 = Math.max(...pts.map(p => p[0]));
    const ymax = niceMax(Math.max(...pts.map(p => p[1])));
    const x = t => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 0.5) * (W - L - R);
    const y = v => T + (1 - v / ymax) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = ymax * i / 4;
      svg.appendChild(el("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid"}));
      svg.appendChild(el("text", {x: L - 4, y: y(v) + 4, "text-anchor": "end"}, fmt(v)));
    }
    const ticks = t1 - t0 >= 120 ? [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]
      : [[t1, "middle"]];
    ticks.forEach(([t, anchor]) => {
      svg.appendChild(el("text", {x: x(t), y: H - 8, "text-anchor": anchor}, clock(t)));
    });
    series.forEach((s, i) => {
      let d = "", pen = false;
      for (const [t, v] of s.points) {
        if (v === null) { pen = false; continue; }
        d += (pen ? "L" : "M") + x(t).toFixed(1) + "," + y(v).toFixed(1);
        pen = true;
      }
      svg.appendChild(el("path", {d, fill: "none", stroke: COLORS[i % COLORS.length],
        "stroke-width": 2, "data-series": s.name}));
      const shown = s.points.filter(p => p[1] !== null);
      if (shown.length < 3) {  // too few for a line: dots
        for (const [t, v] of shown) {
          svg.appendChild(el("circle", {cx: x(t), cy: y(v), r: 3,
            fill: COLORS[i % COLORS.length]}));
        }
      }
    });
    const legend = document.createElement("p");
    legend.className = "legend";
    series.forEach((s, i) => {
      const k = document.createElement("span");
      k.style.setProperty("--c", COLORS[i % COLORS.length]);
      k.className = "key";
      k.textContent = s.name;
      legend.appendChild(k);
    });
    fig.appendChild(legend);
    return fig;
  };
})();
