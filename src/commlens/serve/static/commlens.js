// commlens serve: draws every .chart[data-api] from the JSON API with uPlot, and sends the page's writes.
// A chart sets data-rendered="1" and data-points="N" (measured points drawn) once drawn, data-error on failure.
(function () {
  "use strict";

  function cookie(name) {
    const hit = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
    return hit ? decodeURIComponent(hit.slice(name.length + 1)) : null;
  }

  // One request per URL and page: the charts of a page that draw the same document share it.
  const fetched = new Map();
  function getJSON(url) {
    if (!fetched.has(url)) {
      fetched.set(url, (async () => {
        const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        const body = await r.json();
        if (!r.ok) throw new Error(body.error || r.statusText);
        return body;
      })());
    }
    return fetched.get(url);
  }

  async function sendJSON(method, url, data) {
    const r = await fetch(url, {
      method: method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": cookie("commlens_csrf") || "" },
      body: JSON.stringify(data),
    });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }

  const PALETTE = ["#2454a6", "#d92d20", "#079455", "#dc6803", "#7a5af8", "#0e9384", "#c11574", "#475467"];

  function fmtSize(n) {
    const units = ["B", "K", "M", "G", "T"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1 && n % 1024 === 0) { n /= 1024; i++; }
    return n + units[i];
  }

  function width(el) { return Math.max(320, el.clientWidth || 800); }

  // One uPlot over x values shared by every series; ys[i] aligned with xs (null where absent).
  function plot(el, opts) {
    const data = [opts.xs].concat(opts.series.map((s) => s.values));
    const series = [{ label: opts.xLabel }].concat(opts.series.map((s, i) => ({
      label: s.label,
      stroke: s.stroke || PALETTE[i % PALETTE.length],
      width: s.width || 1.5,
      dash: s.dash,
      spanGaps: true,
      points: { show: s.points !== false, size: 5 },
      paths: s.paths,
    })));
    const o = {
      width: width(el),
      height: 320,
      scales: { x: opts.xScale || { time: false }, y: opts.yScale || {} },
      axes: [
        Object.assign({ label: opts.xLabel }, opts.xAxis || {}),
        Object.assign({ label: opts.yLabel, size: 70 }, opts.yAxis || {}),
      ],
      series: series,
      hooks: opts.hooks || {},
    };
    el.textContent = "";
    return new uPlot(o, data, el);
  }

  function counted(seriesList) {
    let n = 0;
    for (const s of seriesList) if (s.measured !== false) for (const v of s.values) if (v !== null && v !== undefined) n++;
    return n;
  }

  // -- run page -------------------------------------------------------------------------------------------
  function perOp(run, value) {
    const xs = Array.from(new Set(run.measurements.filter((m) => m.size_bytes > 0).map((m) => m.size_bytes))).sort((a, b) => a - b);
    const groups = new Map();
    for (const m of run.measurements) {
      if (m.size_bytes <= 0) continue;
      const name = (m.group ? m.group + " " : "") + m.op + (m.algo !== "builtin" ? " [" + m.algo + "]" : "") + " " + m.dtype + (m.in_place ? " in-place" : " out-of-place");
      if (!groups.has(name)) groups.set(name, new Map());
      const v = value(m);
      if (v !== null && v > 0) groups.get(name).set(m.size_bytes, v);
    }
    const series = Array.from(groups.entries()).map(([label, byX], i) => ({
      label: label,
      values: xs.map((x) => (byX.has(x) ? byX.get(x) : null)),
      dash: label.endsWith(" in-place") ? [6, 3] : undefined,
    }));
    return { xs: xs, series: series };
  }

  const logX = { scale: { time: false, distr: 3, log: 2 }, axis: { values: (u, vals) => vals.map(fmtSize) } };

  // commlens expect's band per op (lower and upper edge, GB/s), drawn as unmeasured dashed lines.
  function expectBand(run) {
    if (!run.expect) return [];
    const ops = Array.from(new Set(run.expect.rows.map((r) => r.op)));
    const out = [];
    for (const op of ops) {
      const rows = run.expect.rows.filter((r) => r.op === op);
      for (const [edge, key] of [["lower", "lower_busbw_bytes_per_s"], ["upper", "upper_busbw_bytes_per_s"]]) {
        const byX = new Map(rows.map((r) => [r.size_bytes, r[key] / 1e9]));
        out.push({ label: op + " expected (" + edge + ")", byX: byX, stroke: "#98a2b3", dash: [2, 4], points: false, measured: false });
      }
    }
    return out;
  }

  function drawRunAgainstSize(el, run, value, yLabel, extra) {
    const d = perOp(run, value);
    for (const band of extra || []) {
      d.series.push(Object.assign({}, band, { values: d.xs.map((x) => (band.byX.has(x) ? band.byX.get(x) : null)) }));
    }
    plot(el, {
      xs: d.xs, series: d.series, xLabel: "size", yLabel: yLabel,
      xScale: logX.scale, xAxis: logX.axis, yScale: { distr: 3, log: 10 },
    });
    return counted(d.series);
  }

  const renderers = {
    "run-busbw": (el, run) => drawRunAgainstSize(el, run, (m) => m.busbw_bytes_per_s / 1e9, "busBW GB/s", expectBand(run)),
    "run-time": (el, run) => drawRunAgainstSize(el, run, (m) => m.mean_s * 1e6, "time us"),
    "run-dist": (el, run) => {
      const select = document.getElementById("dist-row");
      const rows = run.measurements.filter((m) => m.samples_s.length > 0);
      if (select && !select.options.length) {
        rows.forEach((m) => {
          const o = document.createElement("option");
          o.value = String(m.position);
          o.textContent = m.op + " " + fmtSize(m.size_bytes) + " " + m.dtype + (m.in_place ? " in" : " out") + " (" + m.samples_s.length + " iterations)";
          select.appendChild(o);
        });
        if (rows.length) select.value = String(rows[rows.length - 1].position);
        select.addEventListener("change", () => renderers["run-dist"](el, run) && null);
      }
      const chosen = rows.find((m) => String(m.position) === (select ? select.value : "")) || rows[rows.length - 1];
      if (!chosen) { el.textContent = "No per-iteration times were kept for this run."; return 0; }
      const xs = chosen.samples_s.map((_, i) => i + 1);
      const ys = chosen.samples_s.map((s) => s * 1e6);
      const sorted = ys.slice().sort((a, b) => a - b);
      const median = sorted[Math.floor(sorted.length / 2)];
      const series = [
        { label: "iteration time us", values: ys, paths: () => null },
        { label: "median", values: xs.map(() => median), points: false, dash: [4, 4], measured: false },
      ];
      plot(el, { xs: xs, series: series, xLabel: "iteration", yLabel: "time us" });
      el.dataset.points = String(ys.length);
      return ys.length;
    },

    // -- history page -----------------------------------------------------------------------------------
    history: (el, doc) => {
      const byTime = doc.order === "time";
      const pts = doc.points.filter((p) => p.status !== "check_failed");
      const xs = pts.map((p, i) => (byTime ? Date.parse(p.started_at) / 1000 : i));
      const ys = pts.map((p) => p.mean_s * 1e6);
      const index = new Map(doc.points.map((p, i) => [p.run_id, i]));
      const starts = doc.changes.map((c) => pts.findIndex((p) => p.run_id === c.run_id)).filter((i) => i >= 0);
      // each point's level: the mean of the segment it lies in
      const levels = ys.map(() => null);
      if (doc.changes.length) {
        const cs = doc.changes.slice().sort((a, b) => index.get(a.run_id) - index.get(b.run_id));
        let k = 0;
        for (let i = 0; i < pts.length; i++) {
          while (k < cs.length && index.get(pts[i].run_id) >= index.get(cs[k].run_id)) k++;
          levels[i] = (k === 0 ? cs[0].mean_before_s : cs[k - 1].mean_after_s) * 1e6;
        }
      }
      const series = [{ label: "mean time us", values: ys, paths: () => null }];
      if (doc.changes.length) series.push({ label: "level", values: levels, points: false, measured: false, stroke: "#dc6803", width: 2, paths: uPlot.paths.stepped({ align: 1 }) });
      if (doc.baseline && doc.baseline.mean_s) {
        const b = doc.baseline.mean_s * 1e6;
        series.push({ label: "baseline", values: xs.map(() => b), points: false, dash: [8, 4], measured: false, stroke: "#079455" });
      }
      const revisions = pts.map((p) => (p.revision || "-").slice(0, 8));
      const marks = (u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#d92d20";
        ctx.setLineDash([5, 4]);
        ctx.lineWidth = 1.5;
        for (const i of starts) {
          const x = u.valToPos(xs[i], "x", true);
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      };
      plot(el, {
        xs: xs, series: series, xLabel: byTime ? "run start (UTC)" : "revision",
        yLabel: "time us", xScale: { time: byTime },
        xAxis: byTime ? {} : { values: (u, vals) => vals.map((v) => (Number.isInteger(v) && revisions[v] ? revisions[v] : "")) },
        hooks: { draw: [marks] },
      });
      el.dataset.changes = String(starts.length);
      return ys.length;
    },
  };

  async function draw(el) {
    const kind = el.dataset.kind;
    try {
      if (!renderers[kind]) throw new Error("no renderer for chart kind " + kind);
      const data = await getJSON(el.dataset.api);
      const n = renderers[kind](el, data);
      el.dataset.points = String(n);
      el.dataset.rendered = "1";
    } catch (e) {
      el.dataset.error = String(e.message || e);
      el.textContent = "error: " + (e.message || e);
      console.error("chart " + el.id + ": " + (e.message || e));
    }
  }

  // A write form of the history page: on submit, PUT what ``body(form, fields)`` makes to ``url``, then reload
  // the page to show it (or say the error under the form, in ``#<id without -form>-result``).
  function wireWriteForm(id, url, what, body) {
    const form = document.getElementById(id);
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const out = document.getElementById(id.replace(/-form$/, "-result"));
      try {
        await sendJSON("PUT", url, body(form, new FormData(form)));
        out.textContent = what + " set";
        window.location.reload();
      } catch (e) {
        out.textContent = "error: " + (e.message || e);
      }
    });
  }

  function wireBaselineForm() {
    wireWriteForm("baseline-form", "/api/baselines", "baseline", (form, f) => ({
      fingerprint: form.dataset.fingerprint,
      tag: form.dataset.tag || null,
      ref_kind: f.get("ref_kind"),
      ref: f.get("ref"),
      note: f.get("note") || "",
    }));
  }

  function wireThresholdForm() {
    const number = (f, name) => (f.get(name) ? Number(f.get(name)) : null);
    wireWriteForm("threshold-form", "/api/thresholds", "threshold", (form, f) => ({
      fingerprint: form.dataset.fingerprint,
      tag: form.dataset.tag || null,
      op: form.dataset.op,
      dtype: form.dataset.dtype,
      size_bytes: Number(form.dataset.size),
      group: form.dataset.group || null,
      min_change: number(f, "min_change"),
      alpha: number(f, "alpha"),
      detect_alpha: number(f, "detect_alpha"),
    }));
  }

  window.commlens = { renderers: renderers, getJSON: getJSON, sendJSON: sendJSON, plot: plot, counted: counted, fmtSize: fmtSize, PALETTE: PALETTE };

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll(".chart[data-api]").forEach((el) => draw(el));
    wireBaselineForm();
    wireThresholdForm();
  });
})();
