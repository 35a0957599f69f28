// The dashboard's interactive parts, drawn from the JSON payload (no library).
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("payload").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const RUN_ROWS = 100;  // run list and bars: the latest runs of the selection

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:")
      ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // Time axis ticks for any span: a fixed step up to a week, calendar months and
  // years beyond; labels as precise as the step (never "23:59:59.999").
  const STEPS = [
    [1e3, "s"], [5e3, "s"], [15e3, "s"], [6e4, "m"], [3e5, "m"], [9e5, "m"],
    [36e5, "h"], [108e5, "h"], [216e5, "h"], [432e5, "h"], [864e5, "d"], [1728e5, "d"],
    [6048e5, "d"],
  ];
  const MONTHS = [1, 3, 6, 12, 24, 60, 120, 240, 600, 1200];
  const AVERAGE_MONTH = 2629746e3;
  function label(ms, unit) {
    const iso = new Date(ms).toISOString();
    if (unit === "y") return iso.slice(0, 4);
    if (unit === "mo") return iso.slice(0, 7);
    if (unit === "d") return iso.slice(0, 10);
    if (unit === "h" || unit === "m") return iso.slice(5, 10) + " " + iso.slice(11, 16);
    return iso.slice(11, 19);
  }
  function timeTicks(lo, hi, most) {
    const ticks = [];
    const fixed = STEPS.find(([s]) => (hi - lo) / s <= most);
    if (fixed) {
      const [step, unit] = fixed;
      for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) ticks.push([t, label(t, unit)]);
      return ticks;
    }
    const months = MONTHS.find((m) => (hi - lo) / (m * AVERAGE_MONTH) <= most) || 1200;
    const start = new Date(lo);
    let index = start.getUTCFullYear() * 12 + start.getUTCMonth();
    index -= index % months;
    for (; ; index += months) {
      const t = Date.UTC(Math.floor(index / 12), index % 12, 1);
      if (t > hi) break;
      if (t >= lo) ticks.push([t, label(t, months % 12 ? "mo" : "y")]);
    }
    return ticks;
  }
  window.shadowcheckTimeTicks = timeTicks;  // for the tests

  function legendItems(svg, names, colours, x, y) {
    names.forEach((name, i) => {
      svg.appendChild(el("svg:rect", {x: x, y: y + i * 16, width: 10, height: 10,
        fill: colours[i]}));
      svg.appendChild(el("svg:text", {x: x + 14, y: y + 9 + i * 16, class: "lbl"}, name));
    });
  }

  // --- matrix drill-down -----------------------------------------------------
  function certLink(cert, anchor, text) {
    if (!cert) return document.createTextNode("");
    return el("a", {href: cert + "#" + anchor, target: "_blank", rel: "noopener"}, text);
  }
  function drill(cell) {
    const target = data.targets[Number(cell.dataset.t)];
    const behaviour = cell.dataset.b;
    const rows = ((data.drill[cell.dataset.t] || {})[behaviour]) || [];
    const box = document.getElementById("drill");
    box.replaceChildren();
    const head = el("h3", {}, behaviour + " on " + target.name + " " + target.version);
    box.appendChild(head);
    const meta = el("p", {class: "meta"},
      "run " + target.run + " at " + target.at + " · " + rows.length + " scenario(s) ");
    meta.appendChild(certLink(target.cert, "behaviour-" + behaviour, "evidence"));
    box.appendChild(meta);
    const table = el("table", {class: "drill"});
    table.appendChild(el("tr", {}));
    table.firstChild.append(el("th", {}, "scenario"), el("th", {}, "status"),
      el("th", {}, "reason"), el("th", {}, "evidence"));
    for (const [s, status, m] of rows) {
      const name = data.scenarios[s];
      const tr = el("tr", {});
      const badge = el("td", {class: "status", style: "background:" + data.colours[status]},
        status);
      const link = el("td", {});
      link.appendChild(certLink(target.cert, "scenario-" + name, "certification"));
      tr.append(el("td", {}, name), badge, el("td", {}, m >= 0 ? data.messages[m] : ""), link);
      table.appendChild(tr);
    }
    box.appendChild(table);
    for (const other of document.querySelectorAll("#matrix td.selected")) {
      other.classList.remove("selected");
    }
    cell.classList.add("selected");
    // With many targets the panel wraps below the matrix: bring it into view.
    if (box.scrollIntoView) box.scrollIntoView({block: "nearest"});
  }
  for (const cell of document.querySelectorAll("#matrix td.cell")) {
    cell.addEventListener("click", () => drill(cell));
  }

  // --- runs: list and stacked bars --------------------------------------------
  const COUNT_NAMES = ["passed", "failed", "errors", "skipped"];
  const COUNT_COLOURS = [data.colours.PASS, data.colours.FAIL, data.colours.INCONCLUSIVE,
    data.colours.SKIPPED];
  const select = document.getElementById("run-target");
  const targets = Array.from(new Set(data.runs.map((r) => r[1]))).sort();
  select.appendChild(el("option", {value: ""}, "all targets"));
  for (const t of targets) select.appendChild(el("option", {value: t}, t));

  function drawRuns() {
    const chosen = data.runs.filter((r) => !select.value || r[1] === select.value);
    const shown = chosen.slice(-RUN_ROWS);
    document.getElementById("run-note").textContent =
      "latest " + shown.length + " of " + chosen.length + " runs (all in trends.csv)";
    const body = document.querySelector("#runs tbody");
    body.replaceChildren();
    for (const r of shown.slice().reverse()) {
      const tr = el("tr", {});
      for (const value of [r[0].replace("T", " ").replace("Z", ""), r[1], r[2], r[3],
        r[4], r[5], r[6], r[7]]) tr.appendChild(el("td", {}, value));
      const link = el("td", {});
      if (r[8]) link.appendChild(el("a", {href: r[8], target: "_blank", rel: "noopener"},
        "certification"));
      tr.appendChild(link);
      body.appendChild(tr);
    }
    drawBars(shown);
  }

  function drawBars(runs) {
    const box = document.getElementById("bars");
    box.replaceChildren();
    const width = 1100, height = 260, left = 48, bottom = 40, top = 10, right = 110;
    const svg = el("svg:svg", {viewBox: `0 0 ${width} ${height}`, width: "100%",
      class: "bars"});
    const most = Math.max(1, ...runs.map((r) => r[4] + r[5] + r[6] + r[7]));
    const plotW = width - left - right, plotH = height - top - bottom;
    const slot = plotW / Math.max(runs.length, 1);
    for (const frac of [0, 0.5, 1]) {
      const y = top + plotH * (1 - frac);
      svg.appendChild(el("svg:line", {x1: left, x2: left + plotW, y1: y, y2: y, class: "grid"}));
      svg.appendChild(el("svg:text", {x: left - 4, y: y + 4, class: "lbl end"},
        Math.round(most * frac)));
    }
    runs.forEach((r, i) => {
      let y = top + plotH;
      COUNT_NAMES.forEach((name, k) => {
        const h = plotH * r[4 + k] / most;
        if (h <= 0) return;
        y -= h;
        const rect = el("svg:rect", {x: left + i * slot + slot * 0.1, y: y,
          width: Math.max(slot * 0.8, 1), height: h, fill: COUNT_COLOURS[k]});
        rect.appendChild(el("svg:title", {},
          `${r[1]} ${r[2]} ${r[3]} (${r[0]}): ${r[4 + k]} ${name}`));
        svg.appendChild(rect);
      });
    });
    // A few run times under the bars, not one per bar.
    const every = Math.max(1, Math.ceil(runs.length / 6));
    runs.forEach((r, i) => {
      if (i % every) return;
      svg.appendChild(el("svg:text", {x: left + (i + 0.5) * slot, y: height - bottom + 16,
        class: "lbl mid"}, r[0].slice(0, 16).replace("T", " ")));
    });
    legendItems(svg, COUNT_NAMES, COUNT_COLOURS, width - right + 10, top);
    box.appendChild(svg);
  }
  select.addEventListener("change", drawRuns);
  drawRuns();

  // --- durations ---------------------------------------------------------------
  function drawDurations() {
    const box = document.getElementById("durations");
    const series = data.durations;
    if (!series.length) {
      box.appendChild(el("p", {class: "empty"}, "No duration yet."));
      return;
    }
    const width = 1100, height = 300, left = 56, bottom = 40, top = 10, right = 260;
    const svg = el("svg:svg", {viewBox: `0 0 ${width} ${height}`, width: "100%",
      class: "lines"});
    const points = series.flatMap((s) => s.points.map(([d, v]) => [Date.parse(d), v || 0]));
    let lo = Math.min(...points.map((p) => p[0]));
    let hi = Math.max(...points.map((p) => p[0]));
    // Days: pad half a day each side, so one day is a point in the middle, not a
    // millisecond-wide axis.
    lo -= 432e5;
    hi += 432e5;
    const top_v = Math.max(...points.map((p) => p[1]), 0.001) * 1.1;
    const plotW = width - left - right, plotH = height - top - bottom;
    const x = (t) => left + plotW * (t - lo) / (hi - lo);
    const y = (v) => top + plotH * (1 - v / top_v);
    for (const [t, text] of timeTicks(lo, hi, 7)) {
      svg.appendChild(el("svg:line", {x1: x(t), x2: x(t), y1: top, y2: top + plotH,
        class: "grid"}));
      svg.appendChild(el("svg:text", {x: x(t), y: height - bottom + 16, class: "lbl mid tick"},
        text));
    }
    for (const frac of [0, 0.5, 1]) {
      svg.appendChild(el("svg:text", {x: left - 4, y: y(top_v * frac) + 4, class: "lbl end"},
        (top_v * frac).toFixed(2) + " s"));
    }
    const palette = ["#1565c0", "#6a1b9a", "#00838f", "#ef6c00", "#2e7d32", "#ad1457",
      "#4e342e", "#283593", "#9e9d24", "#37474f"];
    series.forEach((s, i) => {
      const colour = palette[i % palette.length];
      const xy = s.points.map(([d, v]) => [x(Date.parse(d)), y(v || 0)]);
      svg.appendChild(el("svg:polyline", {points: xy.map((p) => p.join(",")).join(" "),
        fill: "none", stroke: colour, "stroke-width": 1.5}));
      xy.forEach(([px, py], k) => {
        const dot = el("svg:circle", {cx: px, cy: py, r: 3, fill: colour});
        dot.appendChild(el("svg:title", {}, `${s.name} ${s.points[k][0]}: ${s.points[k][1]} s`));
        svg.appendChild(dot);
      });
    });
    legendItems(svg, series.map((s) => s.name.slice(0, 40)), series.map((_, i) =>
      palette[i % palette.length]), width - right + 10, top);
    box.appendChild(svg);
  }
  drawDurations();
  window.shadowcheckRendered = performance.now();
})();
