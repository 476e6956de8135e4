// commlens serve: the charts of the diagnose, projection and live pages, as renderers of commlens.js.
// Each renderer draws from its chart's API document and returns the number of data points plotted.
(function () {
  "use strict";
  const cl = window.commlens;
  const R = cl.renderers;

  // x values (sorted, unique) and one aligned series per label, from (label, x, y) triples
  function aligned(triples) {
    const xs = Array.from(new Set(triples.map((t) => t[1]))).sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const byLabel = new Map();
    for (const [label, x, y] of triples) {
      if (!byLabel.has(label)) byLabel.set(label, xs.map(() => null));
      byLabel.get(label)[at.get(x)] = y;
    }
    const series = Array.from(byLabel.entries()).map(([label, values]) => ({ label: label, values: values }));
    return { xs: xs, series: series };
  }

  // -- stragglers: median lateness of each rank, one line per collective ------------------------------------
  R["stragglers-lateness"] = (el, report) => {
    const triples = report.payload.rows
      .filter((r) => r.lateness_p50_s !== null && r.lateness_p50_s !== undefined)
      .map((r) => [r.op, r.rank, r.lateness_p50_s * 1e6]);
    const d = aligned(triples);
    cl.plot(el, { xs: d.xs, series: d.series, xLabel: "rank", yLabel: "lateness p50 us", xAxis: { incrs: [1, 2, 5, 10, 20, 50, 100] } });
    return cl.counted(d.series);
  };

  // -- sweep: a metric against one varied field, one line per value of the others ---------------------------
  const RESULT = new Set(["step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu", "memory_gb", "layout", "error", "kind"]);

  function sweepFields(rows) {
    const seen = [];
    for (const r of rows) for (const k of Object.keys(r)) if (!RESULT.has(k) && !seen.includes(k)) seen.push(k);
    return seen;
  }

  function drawSweep(el, report) {
    const rows = report.payload.rows;
    const fields = sweepFields(rows);
    const select = document.getElementById("sweep-x");
    const xField = select && fields.includes(select.value) ? select.value : fields[0];
    const others = fields.filter((f) => f !== xField);
    const metric = el.dataset.metric;
    const feasible = rows.filter((r) => !("error" in r) && typeof r[metric] === "number");
    const raw = Array.from(new Set(rows.map((r) => r[xField])));
    const numeric = raw.every((v) => typeof v === "number");
    const labels = numeric ? [] : raw.map(String).sort();
    const xOf = (v) => (numeric ? v : labels.indexOf(String(v)));
    const scale = metric === "mfu" ? 100 : 1;
    const triples = feasible.map((r) => [
      others.length ? others.map((f) => f + "=" + r[f]).join(", ") : el.dataset.label,
      xOf(r[xField]),
      r[metric] * scale,
    ]);
    const d = aligned(triples);
    const xAxis = numeric ? {} : { values: (u, vals) => vals.map((v) => (Number.isInteger(v) && labels[v] !== undefined ? labels[v] : "")) };
    // parallel degrees, GPU counts and batch sizes grow by factors: a log2 axis spaces them evenly
    const geometric = numeric && raw.every((v) => v > 0) && Math.max(...raw) >= 4 * Math.min(...raw);
    cl.plot(el, {
      xs: d.xs, series: d.series, xLabel: xField, yLabel: metric === "mfu" ? "MFU %" : el.dataset.label, xAxis: xAxis,
      xScale: geometric ? { time: false, distr: 3, log: 2 } : { time: false },
    });
    const n = cl.counted(d.series);
    el.dataset.x = xField;
    el.dataset.points = String(n);
    return n;
  }

  R.sweep = (el, report) => {
    const select = document.getElementById("sweep-x");
    if (select && !select.dataset.wired) {
      select.dataset.wired = "1";
      select.addEventListener("change", () => {
        document.querySelectorAll('.chart[data-kind="sweep"]').forEach((c) => {
          if (c._report) drawSweep(c, c._report);
        });
      });
    }
    el._report = report;
    return drawSweep(el, report);
  };

  // -- live: the monitor's windows --------------------------------------------------------------------------
  function windowSeries(doc, value, keyOf) {
    const ranks = new Set(doc.windows.map((w) => w.rank));
    const triples = [];
    const sums = new Map();
    for (const w of doc.windows) {
      const v = value(w);
      if (v === null || v === undefined || !isFinite(v)) continue;
      const label = keyOf(w) + (ranks.size > 1 ? " r" + w.rank : "");
      const k = label + "\u0000" + w.end_s;
      if (sums.has(k)) sums.get(k)[2] += v;
      else { const t = [label, w.end_s, v]; sums.set(k, t); triples.push(t); }
    }
    return aligned(triples);
  }

  function drawLive(el, d, yLabel) {
    cl.plot(el, { xs: d.xs, series: d.series, xLabel: "window end", yLabel: yLabel, xScale: { time: true } });
    return cl.counted(d.series);
  }

  R["live-busbw"] = (el, doc) => drawLive(
    el,
    windowSeries(doc, (w) => w.busbw_p50_bytes_per_s / 1e9,
      (w) => w.group + " " + w.op + " " + w.dtype + " " + cl.fmtSize(w.size_bucket)),
    "busBW p50 GB/s",
  );

  R["live-time"] = (el, doc) => drawLive(
    el,
    windowSeries(doc, (w) => w.time_s * 1e3, (w) => w.group + " " + w.op),
    "time ms",
  );
})();
