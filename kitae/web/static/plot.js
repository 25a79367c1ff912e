// kitae run page: a small SVG line chart (no dependencies).
//
//   const chart = KPlot.lineChart(element, {height: 220});
//   chart.update([{key: "reward", label: "reward", side: "left", points: [[1, 0.2], [2, 0.4]]}]);
//
// Series share the x axis (training step). A series on the "right" side gets its own y axis (dashed line),
// for quantities of another scale (KL coefficient next to KL). A null value breaks the line. Hovering shows
// every series' value at the nearest step; clicking a legend entry hides or shows that series.
// Every label is set with textContent: keys and values never become markup.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d",
    "#4b5563", "#ea580c"];

  function svg(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }

  function div(cls, text) {
    const el = document.createElement("div");
    el.className = cls;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  // Round tick values: steps of 1, 2 or 5 times a power of ten.
  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    let step = Math.pow(10, Math.floor(Math.log10(span / count)));
    const err = (count / span) * step;
    if (err <= 0.15) step *= 10;
    else if (err <= 0.35) step *= 5;
    else if (err <= 0.75) step *= 2;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
      ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return ticks;
  }

  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(parseFloat(v.toPrecision(4)));
  }

  // Tick labels with as many decimals as the tick spacing needs, so close ticks never read the same
  // (5.8445, 5.8450, 5.8455 rather than 5.845 three times).
  function tickFormat(ticks) {
    if (ticks.length < 2) return fmt;
    const step = Math.abs(ticks[1] - ticks[0]);
    const big = Math.max(...ticks.map(Math.abs));
    const decimals = Math.max(0, Math.ceil(-Math.log10(step) - 1e-9));
    if (big < 1e5 && (decimals <= 6 || (big >= 0.1 && decimals <= 9))) return (v) => v.toFixed(decimals);
    const digits = Math.max(1, Math.floor(Math.log10(big)) - Math.floor(Math.log10(step)));
    return (v) => (v === 0 ? "0" : v.toExponential(Math.min(digits, 12)));
  }

  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (v === null || v === undefined) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (lo === Infinity) return null;
    if (lo === hi) {
      const pad = Math.abs(lo) * 0.1 || 1;
      return [lo - pad, hi + pad];
    }
    const pad = (hi - lo) * 0.05;
    return [lo - pad, hi + pad];
  }

  // Index of the point whose step is nearest to x (points sorted by step).
  function nearest(points, x) {
    let lo = 0, hi = points.length - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] < x) lo = mid; else hi = mid;
    }
    return Math.abs(points[lo][0] - x) <= Math.abs(points[hi][0] - x) ? lo : hi;
  }

  // A null value lifts the pen; a point alone between two gaps becomes a zero-length segment, which the
  // round line cap draws as a dot.
  function pathData(points, sx, sy) {
    let d = "";
    const has = (i) => i >= 0 && i < points.length && points[i][1] !== null && points[i][1] !== undefined;
    for (let i = 0; i < points.length; i++) {
      if (!has(i)) continue;
      const xy = sx(points[i][0]).toFixed(1) + "," + sy(points[i][1]).toFixed(1);
      d += (has(i - 1) ? "L" : "M") + xy + (has(i - 1) || has(i + 1) ? "" : "h0");
    }
    return d;
  }

  class LineChart {
    constructor(el, opts) {
      this.opts = Object.assign({height: 220, xLabel: "step"}, opts || {});
      this.series = [];
      this.hidden = new Set();
      this.root = div("kchart");
      this.plot = div("kchart-plot");
      this.legend = div("kchart-legend");
      this.tip = div("kchart-tip");
      this.tip.hidden = true;
      this.plot.appendChild(this.tip);
      this.root.append(this.plot, this.legend);
      el.appendChild(this.root);
      if (window.ResizeObserver) {
        this.resizer = new ResizeObserver(() => {
          if (this.plot.clientWidth !== this.width) this.render();
        });
        this.resizer.observe(this.plot);
      }
    }

    update(series) {
      this.series = series.map((s, i) => Object.assign({color: COLORS[i % COLORS.length], side: "left"}, s));
      this.render();
    }

    destroy() {
      if (this.resizer) this.resizer.disconnect();
    }

    render() {
      this.width = this.plot.clientWidth || 600;
      const W = this.width, H = this.opts.height;
      const shown = this.series.filter((s) => !this.hidden.has(s.key));
      const left = shown.filter((s) => s.side !== "right"), right = shown.filter((s) => s.side === "right");
      const xs = extent(shown.flatMap((s) => s.points.filter((p) => p[1] !== null).map((p) => p[0])));
      const yl = extent(left.flatMap((s) => s.points.map((p) => p[1])));
      const yr = extent(right.flatMap((s) => s.points.map((p) => p[1])));
      const ticks = (d) => (d ? niceTicks(d[0], d[1], 5) : []);
      const lt = ticks(yl), rt = ticks(yr);
      const lf = tickFormat(lt), rf = tickFormat(rt);
      const room = (ts, f) => Math.max(40, 12 + 6.5 * Math.max(0, ...ts.map((t) => f(t).length)));  // ~6.5 px a digit
      const m = {l: room(lt, lf), r: right.length ? room(rt, rf) : 14, t: 10, b: 30};
      const el = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "kchart-svg", role: "img"});
      this.plot.querySelector("svg")?.remove();
      this.plot.insertBefore(el, this.tip);
      this.renderLegend();
      if (!xs) {
        const t = svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "kchart-empty"});
        t.textContent = "no data yet";
        el.appendChild(t);
        return;
      }
      let [x0, x1] = xs;
      if (this.series.every((s) => s.points.length <= 1)) { x0 -= 1; x1 += 1; }
      const sx = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
      const scaleY = (d) => (y) => H - m.b - ((y - d[0]) / (d[1] - d[0])) * (H - m.t - m.b);
      const syl = yl ? scaleY(yl) : null, syr = yr ? scaleY(yr) : null;
      this.drawAxes(el, {W, H, m, x0, x1, sx, syl, syr, left: [lt, lf], right: [rt, rf]});
      for (const s of shown) {
        const sy = s.side === "right" ? syr : syl;
        if (!sy) continue;
        const n = s.points.filter((p) => p[1] !== null).length;
        const attrs = {d: pathData(s.points, sx, sy), stroke: s.color, class: "series", "data-key": s.key,
          "data-points": n};
        if (s.side === "right") attrs["stroke-dasharray"] = "5 3";
        el.appendChild(svg("path", attrs));
        if (n <= 15) {  // few points (evals): mark each one
          for (const [x, y] of s.points) {
            if (y !== null) el.appendChild(svg("circle", {cx: sx(x), cy: sy(y), r: 2.5, fill: s.color}));
          }
        }
      }
      this.hover(el, {m, W, H, x0, x1, sx, shown});
    }

    drawAxes(el, g) {
      const {W, H, m, x0, x1, sx, syl, syr} = g;
      const axis = svg("g", {class: "kchart-axis"});
      for (const t of niceTicks(x0, x1, Math.max(2, Math.floor((W - m.l - m.r) / 90)))) {
        if (Math.abs(t - Math.round(t)) > 1e-9) continue;  // steps are whole numbers
        axis.appendChild(svg("line", {x1: sx(t), x2: sx(t), y1: m.t, y2: H - m.b, class: "grid"}));
        const label = svg("text", {x: sx(t), y: H - m.b + 16, "text-anchor": "middle"});
        label.textContent = String(Math.round(t));
        axis.appendChild(label);
      }
      const yAxis = ([ticks, format], sy, x, anchor, grid) => {
        for (const t of ticks) {
          if (grid) axis.appendChild(svg("line", {x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t), class: "grid"}));
          const label = svg("text", {x, y: sy(t) + 4, "text-anchor": anchor});
          label.textContent = format(t);
          axis.appendChild(label);
        }
      };
      if (syl) yAxis(g.left, syl, m.l - 6, "end", true);
      if (syr) yAxis(g.right, syr, W - m.r + 6, "start", !syl);
      axis.appendChild(svg("rect", {x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, class: "frame"}));
      el.appendChild(axis);
    }

    hover(el, g) {
      const {m, W, H, x0, x1, sx, shown} = g;
      const cursor = svg("line", {y1: m.t, y2: H - m.b, class: "cursor", visibility: "hidden"});
      const area = svg("rect", {x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "transparent"});
      el.append(cursor, area);
      area.addEventListener("mousemove", (ev) => {
        const box = el.getBoundingClientRect();
        const x = x0 + ((ev.clientX - box.left - m.l) / (W - m.l - m.r)) * (x1 - x0);
        const rows = [];
        let step = null;
        for (const s of shown) {
          if (!s.points.length) continue;
          const p = s.points[nearest(s.points, x)];
          step = step === null || Math.abs(p[0] - x) < Math.abs(step - x) ? p[0] : step;
          rows.push([s, p]);
        }
        if (step === null) return;
        cursor.setAttribute("x1", sx(step));
        cursor.setAttribute("x2", sx(step));
        cursor.setAttribute("visibility", "visible");
        this.tip.replaceChildren(div("kchart-tip-step", `${this.opts.xLabel} ${step}`));
        for (const [s, p] of rows) {
          const row = div("kchart-tip-row");
          const sw = div("swatch");
          sw.style.background = s.color;
          const at = p[0] !== step ? ` (step ${p[0]})` : "";
          row.append(sw, document.createTextNode(`${s.label || s.key}: ${fmt(p[1])}${at}`));
          this.tip.appendChild(row);
        }
        this.tip.hidden = false;
        const tx = sx(step) + 12, flip = tx + this.tip.offsetWidth > W;
        this.tip.style.left = `${flip ? sx(step) - 12 - this.tip.offsetWidth : tx}px`;
        this.tip.style.top = `${m.t + 4}px`;
      });
      area.addEventListener("mouseleave", () => {
        this.tip.hidden = true;
        cursor.setAttribute("visibility", "hidden");
      });
    }

    renderLegend() {
      this.legend.replaceChildren();
      for (const s of this.series) {
        const item = document.createElement("button");
        item.type = "button";
        item.className = "kchart-key" + (this.hidden.has(s.key) ? " off" : "");
        const sw = div("swatch" + (s.side === "right" ? " dashed" : ""));
        sw.style.borderColor = s.color;
        sw.style.background = s.side === "right" ? "transparent" : s.color;
        const last = [...s.points].reverse().find((p) => p[1] !== null);
        item.append(sw, document.createTextNode(`${s.label || s.key}${s.side === "right" ? " (right)" : ""}`),
          Object.assign(document.createElement("span"), {className: "kchart-last",
            textContent: last ? fmt(last[1]) : "–"}));
        item.title = "show or hide this series";
        item.addEventListener("click", () => {
          if (this.hidden.has(s.key)) this.hidden.delete(s.key); else this.hidden.add(s.key);
          this.render();
        });
        this.legend.appendChild(item);
      }
    }
  }

  window.KPlot = {
    lineChart: (el, opts) => new LineChart(el, opts),
    fmt,
    niceTicks,
    tickFormat,
  };
})();
