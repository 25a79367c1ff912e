// kitae run page: runs, live plots, groups and samples, prompt history, run comparison, labels.
//
// A single page with hash routes; every byte of data comes from the JSON API (/api/..., kitae/web/api.py).
// Model output is untrusted: the DOM is built with h() below, which adds strings as text nodes, never as
// markup (no innerHTML anywhere), and the server's Content-Security-Policy refuses inline scripts as well.
"use strict";

(function () {
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");
  const state = {config: {poll_ms: 2000}, timers: [], charts: [], generation: 0};
  const fmt = (v) => KPlot.fmt(v);
  const ORDERS = {worst: "worst mean reward first", step: "newest step first", variance: "widest reward spread first"};
  const FILTERS = {all: "all groups", zero_variance: "zero variance (no learning signal)",
    truncated: "with truncated samples"};
  const LABEL_SCALE = [1, 2, 3, 4, 5];

  // ---- DOM and HTTP helpers ------------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    return put(el, ...children);
  }

  // Replace the children of `el` (same rules as h(): strings become text, null is skipped).
  function put(el, ...children) {
    el.replaceChildren();
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  async function api(path, opts) {
    const res = await fetch("/api" + path, Object.assign({headers: {"Accept": "application/json"}}, opts || {}));
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) throw new Error((body && body.error) || `${res.status} ${res.statusText}`);
    return body;
  }

  function post(path, payload) {
    return api(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(payload)});
  }

  function every(ms, fn) {
    const gen = state.generation;
    const tick = async () => {
      if (gen !== state.generation) return;
      try { await fn(); } catch (e) { showLive("update failed: " + e.message, "error"); }
      if (gen === state.generation) state.timers.push(setTimeout(tick, ms));
    };
    state.timers.push(setTimeout(tick, ms));
  }

  function showLive(text, cls) {
    const el = document.getElementById("live");
    el.textContent = text;
    el.className = cls || "";
  }

  function showRunStatus(status, step) {
    if (status === "running") showLive(`live · step ${step}`, "live");
    else showLive(`${status} · step ${step}`);
  }

  const enc = encodeURIComponent;
  const runLink = (run, rest) => `#/run/${enc(run)}${rest || ""}`;
  const badge = (status) => h("span", {class: `badge status-${status}`}, status);
  const time = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "–");
  const clip = (text, n) => (text.length > n ? text.slice(0, n) + "…" : text);
  const signed = (v) => (v === null || v === undefined ? "–" : (v > 0 ? "+" : "") + fmt(v));

  function setCrumbs(...items) {
    put(crumbs, ...items.flatMap((it, i) => [i ? h("span", {class: "sep"}, "›") : null,
      it.href ? h("a", {href: it.href}, it.text) : h("span", null, it.text)]));
  }

  function errorBox(e) {
    return h("div", {class: "error"}, e.message || String(e));
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  // ---- router --------------------------------------------------------------------------------------
  const ROUTES = [
    [/^\/?$/, () => runsView()],
    [/^\/run\/([^/]+)\/groups$/, (m, q) => groupsView(decodeURIComponent(m[1]), q)],
    [/^\/run\/([^/]+)\/group\/(\d+)$/, (m) => groupView(decodeURIComponent(m[1]), Number(m[2]))],
    [/^\/run\/([^/]+)\/prompt\/(\d+)$/, (m, q) => promptView(decodeURIComponent(m[1]), Number(m[2]), q)],
    [/^\/run\/([^/]+)\/label$/, (m, q) => labelView(decodeURIComponent(m[1]), q)],
    [/^\/run\/([^/]+)$/, (m) => runView(decodeURIComponent(m[1]))],
    [/^\/compare$/, (m, q) => compareView(q)],
  ];

  function navigate() {
    state.generation += 1;
    state.timers.forEach(clearTimeout);
    state.timers = [];
    state.charts.forEach((c) => c.destroy());
    state.charts = [];
    showLive("");
    const [path, qs] = (location.hash.slice(1) || "/").split("?");
    const q = new URLSearchParams(qs || "");
    put(app, h("p", {class: "muted"}, "loading…"));
    for (const [re, view] of ROUTES) {
      const m = path.match(re);
      if (m) {
        const gen = state.generation;
        view(m, q).catch((e) => put(app, errorBox(e))).finally(() => {
          if (gen === state.generation) document.body.dataset.rendered = String(gen);  // for tests and scripts
        });
        return;
      }
    }
    put(app, errorBox(new Error(`no page ${path}`)));
  }

  function chart(el, opts) {
    const c = KPlot.lineChart(el, opts);
    state.charts.push(c);
    return c;
  }

  // ---- runs list -----------------------------------------------------------------------------------
  async function runsView() {
    setCrumbs({text: "runs"});
    const selected = new Set();
    const compare = h("button", {type: "button", disabled: true, onclick: () => {
      const [a, b] = [...selected];
      location.hash = `#/compare${query({a, b})}`;
    }}, "Compare the two selected runs");
    const table = h("table", {class: "runs"});
    const note = h("p", {class: "muted"});
    put(app, h("h1", null, "Runs"), note, table, h("p", null, compare));
    const draw = async () => {
      const data = await api("/runs");
      const none = data.runs.length ? "" : " — none yet: start one with `kitae train`";
      note.textContent = `runs in ${data.runs_dir}${none}`;
      const rows = data.runs.map((r) => h("tr", {dataset: {run: r.name}},
        h("td", null, h("input", {type: "checkbox", "aria-label": `select ${r.name}`, checked: selected.has(r.name),
          disabled: r.status === "unreadable", onchange: (ev) => {
            if (ev.target.checked) selected.add(r.name); else selected.delete(r.name);
            compare.disabled = selected.size !== 2;
          }})),
        h("td", null, r.status === "unreadable" ? r.name : h("a", {href: runLink(r.name)}, r.name),
          r.error ? h("div", {class: "muted small"}, r.error) : null),
        h("td", null, badge(r.status)),
        h("td", null, r.model || "–"),
        h("td", {class: "num"}, r.steps ?? "–"),
        h("td", {class: "num"}, fmt(r.reward)),
        h("td", {class: "num"}, fmt(r.eval_score)),
        h("td", null, time(r.updated_at))));
      put(table, h("thead", null, h("tr", null, ["", "name", "status", "model", "steps", "reward",
        "eval", "updated"].map((t) => h("th", null, t)))), h("tbody", null, rows));
    };
    await draw();
    every(state.config.poll_ms * 2, draw);
  }

  // ---- one run: overview with live plots ------------------------------------------------------------
  function runHeader(run, summary, active) {
    const history = (summary?.events || []).filter((e) => e.kind !== "alarm" && e.kind !== "alarm_cleared");
    const tabs = [["overview", runLink(run)], ["groups", runLink(run, "/groups")], ["label", runLink(run, "/label")],
      ["compare", `#/compare${query({a: run})}`]];
    return h("div", {class: "run-head"},
      h("h1", null, run, " ", summary ? badge(summary.status) : null),
      summary ? h("p", {class: "muted"}, `model ${summary.model || "–"} · `, h("span", {class: "steps"},
        `${summary.steps ?? 0} steps`), " · started " + time(summary.started_at)
        + (summary.finished_at ? ` · finished ${time(summary.finished_at)}` : "")) : null,
      summary?.unsandboxed?.length ? h("p", {class: "unsandboxed", role: "alert"},
        `sandbox: none at ${summary.unsandboxed.join(", ")}: this run ran untrusted code without isolation`) : null,
      history.length ? runHistory(history) : null,
      h("nav", {class: "tabs"}, tabs.map(([name, href]) =>
        h("a", {href, class: name === active ? "active" : ""}, name))));
  }

  // Resumes, restarts, skipped checkpoints and config changes, oldest first (text only: messages hold paths).
  function runHistory(events) {
    return h("details", {class: "events"},
      h("summary", null, `history: ${events.length} event${events.length === 1 ? "" : "s"}`),
      h("table", null, h("thead", null, h("tr", null, ["time", "step", "event", ""].map((c) => h("th", null, c)))),
        h("tbody", null, events.map((e) => h("tr", {"data-kind": e.kind},
          h("td", null, time(e.logged_at)), h("td", null, String(e.step)), h("td", null, e.kind),
          h("td", null, e.message))))));
  }

  // The run's alarms (kitae/trainer/alarms.py), beside the plots: each with its step, kind, message, evidence
  // and links to the groups that show it. Evidence holds model text: text nodes only, as everywhere.
  function alarmsCard(run, alarms) {
    if (!alarms || !alarms.length) return null;
    const value = (v) => (typeof v === "number" || v === null ? fmt(v) : typeof v === "string" ? v : JSON.stringify(v));
    const evidence = (ev) => h("dl", {class: "evidence"}, Object.entries(ev || {}).flatMap(([k, v]) => [
      h("dt", null, k), h("dd", null, k === "examples" && Array.isArray(v)
        ? v.map((t) => h("pre", {class: "text example"}, String(t))) : value(v))]));
    return h("section", {class: "card alarms", role: "alert"},
      h("h3", null, `Alarms (${alarms.length})`),
      h("p", {class: "muted small"}, "Signs of reward hacking or of a run that stopped learning, each raised once. "
        + "docs/reward_hacking.md says what each means and which setting moves it."),
      alarms.map((a) => h("article", {class: "alarm", dataset: {kind: a.kind, step: a.step}},
        h("div", {class: "alarm-head"}, h("b", {class: "alarm-kind"}, a.kind), ` at step ${a.step}`),
        h("p", {class: "alarm-message"}, a.message),
        evidence(a.evidence),
        h("div", {class: "links alarm-groups"}, (a.groups || []).map((g) =>
          h("a", {href: runLink(run, `/group/${g.id}`), dataset: {group: g.id}}, `step ${g.step}, group ${g.group_index}`)),
        h("a", {href: runLink(run, `/groups${query({step: a.step})}`)}, `all groups of step ${a.step}`)))));
  }

  async function runView(run) {
    setCrumbs({text: "runs", href: "#/"}, {text: run});
    let summary = await api(`/runs/${enc(run)}`);
    // A run that ended before the page opened says so too: the live line is the run's status, always.
    showRunStatus(summary.status, summary.steps ?? 0);
    const data = {};  // key -> [[step, value], ...]
    let last = 0, knownKeys = new Set(summary.keys);
    const head = h("div");
    const alarmBox = h("div");
    const grid = h("div", {class: "panels"});
    const evalBox = h("div");
    const configBox = h("details", null, h("summary", null, "config"),
      h("pre", null, JSON.stringify(summary.config, null, 2)));
    put(app, head, alarmBox, grid, evalBox, configBox);
    let charts = [];
    const layout = () => {
      put(head, runHeader(run, summary, "overview"));
      put(alarmBox, alarmsCard(run, summary.alarms));
      charts.forEach((c) => c.destroy());
      put(grid, summary.panels.length ? null : h("p", {class: "muted empty"},
        "No metrics yet: the plots appear with the first logged step."));
      // A panel with a group is one small chart of several under the group's heading (the eval set's metrics).
      const groups = {};
      const groupOf = (p) => {
        if (!groups[p.group]) {
          const charts = h("div", {class: "small-panels"});
          grid.appendChild(h("section", {class: "panel-group card", dataset: {group: p.group}},
            h("h3", null, p.group_title), p.group_help ? h("p", {class: "muted small"}, p.group_help) : null, charts));
          groups[p.group] = charts;
        }
        return groups[p.group];
      };
      charts = summary.panels.map((p) => {
        const card = p.group
          ? h("section", {class: "panel small-panel", dataset: {panel: p.name}}, h("h4", null, p.title))
          : h("section", {class: "panel card", dataset: {panel: p.name}},
            h("h3", null, p.title), p.help ? h("p", {class: "muted small"}, p.help) : null);
        (p.group ? groupOf(p) : grid).appendChild(card);
        const c = chart(card, {height: p.group ? 150 : 200});
        c.panel = p;
        return c;
      });
    };
    const drawChart = (c) => c.update([...c.panel.left.map((k) => ({key: k, side: "left", points: data[k] || []})),
      ...c.panel.right.map((k) => ({key: k, side: "right", points: data[k] || []}))]);
    const draw = () => charts.forEach(drawChart);
    const load = async (since, keys) => {
      const res = await api(`/runs/${enc(run)}/metrics${query({since, points: 1000, keys: keys && keys.join(",")})}`);
      for (const [k, pts] of Object.entries(res.series)) {
        const kept = (data[k] || []).filter((p) => p[0] < since);
        data[k] = kept.concat(pts);
      }
      Object.assign(data, res.evals);
      return res;
    };
    // Panel by panel, in parallel: on a long run the first plots show while the others still load. A live
    // run may move on between these requests, so polling starts at the oldest last step among them.
    const loadAll = async () => {
      const done = await Promise.all(charts.map((c) => load(0, [...c.panel.left, ...c.panel.right]).then((res) => {
        drawChart(c);
        return res.last_step;
      })));
      const steps = done.filter((s) => s !== null);
      last = steps.length ? Math.min(...steps) : 0;
    };
    layout();
    await loadAll();
    put(evalBox, await evalTable(run));
    const evalCount = (series) => Math.max(0, ...Object.values(series).map((pts) => pts.length));
    let evalsShown = evalCount(Object.fromEntries(Object.entries(data).filter(([k]) => k.startsWith("eval/"))));
    const live = async () => {
      const res = await load(last, null);
      if (res.last_step !== null) last = res.last_step;
      if (evalCount(res.evals) !== evalsShown) {
        evalsShown = evalCount(res.evals);
        put(evalBox, await evalTable(run));
      }
      const fresh = Object.keys(res.series).concat(Object.keys(res.evals)).some((k) => !knownKeys.has(k));
      const alarmed = (res.alarms ?? 0) !== (summary.alarms || []).length;
      if (fresh || alarmed || res.status !== summary.status || Object.values(data).some((s) => s.length > 3000)) {
        summary = await api(`/runs/${enc(run)}`);
        knownKeys = new Set(summary.keys);
        layout();
        if (Object.values(data).some((s) => s.length > 3000)) {  // a long live run: downsample again
          for (const k of Object.keys(data)) delete data[k];
          await loadAll();
        }
        put(evalBox, await evalTable(run));
      }
      draw();
      const steps = head.querySelector(".steps");
      if (steps) steps.textContent = `${last} steps`;
      showRunStatus(res.status, last);
      return res.status;
    };
    if (summary.status === "running") {
      const gen = state.generation;
      const tick = async () => {
        if (gen !== state.generation) return;
        let status = "running";
        try { status = await live(); } catch (e) { showLive("update failed: " + e.message, "error"); }
        if (status === "running" && gen === state.generation) state.timers.push(setTimeout(tick, state.config.poll_ms));
      };
      state.timers.push(setTimeout(tick, state.config.poll_ms));
    }
  }

  async function evalTable(run) {
    const {evals} = await api(`/runs/${enc(run)}/evals`);
    if (!evals.length) return h("p", {class: "muted"}, "no evaluations yet");
    const keys = [...new Set(evals.flatMap((e) => Object.keys(e.metrics)))];
    const rows = evals.slice(-20).reverse().map((e) => h("tr", null, h("td", {class: "num"}, e.step),
      keys.map((k) => h("td", {class: "num"}, fmt(e.metrics[k]))), h("td", {class: "num"}, e.n_samples)));
    return h("section", {class: "card"}, h("h3", null, `Evaluations (${evals.length}, latest first)`),
      h("table", null, h("thead", null, h("tr", null, h("th", null, "step"), keys.map((k) => h("th", null, k)),
        h("th", null, "samples"))), h("tbody", null, rows)));
  }

  // ---- group browser -------------------------------------------------------------------------------
  async function groupsView(run, q) {
    setCrumbs({text: "runs", href: "#/"}, {text: run, href: runLink(run)}, {text: "groups"});
    const params = {step: q.get("step") || "", order: q.get("order") || "worst", filter: q.get("filter") || "all",
      page: Number(q.get("page") || 0)};
    const limit = 20;
    const go = (change) => { location.hash = runLink(run, "/groups" + query(Object.assign({}, params, change))); };
    const [summary, res] = await Promise.all([api(`/runs/${enc(run)}`), api(`/runs/${enc(run)}/groups${query({
      step: params.step, order: params.order, filter: params.filter, limit, offset: params.page * limit})}`)]);
    const select = (name, options, value) => h("select",
      {name, onchange: (ev) => go({[name]: ev.target.value, page: 0})},
      Object.entries(options).map(([k, text]) => h("option", {value: k, selected: k === value}, text)));
    const stepInput = h("input", {type: "number", name: "step", min: 0, value: params.step, placeholder: "all steps",
      onchange: (ev) => go({step: ev.target.value, page: 0})});
    const presets = [["worst groups", {order: "worst", filter: "all"}],
      ["zero-variance groups", {filter: "zero_variance"}], ["truncated samples", {filter: "truncated"}],
      ["widest spread", {order: "variance", filter: "all"}]];
    const pages = Math.max(1, Math.ceil(res.total / limit));
    const rows = res.groups.map((g) => h("tr", {class: "link-row", dataset: {group: g.id}, onclick: () => {
      location.hash = runLink(run, `/group/${g.id}`);
    }}, h("td", {class: "num"}, g.step), h("td", {class: "num"}, g.group_index),
    h("td", null, thumbs(run, groupImages(g), "mini"), h("a", {href: runLink(run, `/group/${g.id}`)}, clip(g.prompt, 140))),
    h("td", {class: "num"}, fmt(g.reward_mean)), h("td", {class: "num"}, fmt(g.reward_std)),
    h("td", {class: "num"}, `${g.n_scored}/${g.n_samples}`), h("td", {class: "num"}, g.n_truncated || "")));
    put(app, runHeader(run, summary, "groups"),
      h("div", {class: "controls"},
        h("label", null, "step ", stepInput),
        h("button", {type: "button", onclick: () => go({step: summary.steps ?? "", page: 0})}, "latest step"),
        h("button", {type: "button", onclick: () => go({step: "", page: 0})}, "all steps"),
        h("label", null, "order ", select("order", ORDERS, params.order)),
        h("label", null, "show ", select("filter", FILTERS, params.filter))),
      h("div", {class: "controls presets"}, presets.map(([text, change]) => h("button", {type: "button",
        onclick: () => go(Object.assign({page: 0}, change))}, text))),
      h("p", {class: "muted"}, `${res.total} groups `
        + (params.step !== "" ? `at step ${params.step}` : "over all steps")),
      h("table", {class: "groups"}, h("thead", null, h("tr", null, ["step", "#", "prompt", "mean reward", "std",
        "scored", "truncated"].map((t) => h("th", null, t)))), h("tbody", null, rows)),
      pager(params.page, pages, (page) => go({page})));
  }

  function pager(page, pages, go) {
    return h("div", {class: "pager"},
      h("button", {type: "button", disabled: page <= 0, onclick: () => go(0)}, "« first"),
      h("button", {type: "button", disabled: page <= 0, onclick: () => go(page - 1)}, "‹ previous"),
      h("span", null, ` page ${page + 1} of ${pages} `),
      h("button", {type: "button", disabled: page + 1 >= pages, onclick: () => go(page + 1)}, "next ›"),
      h("button", {type: "button", disabled: page + 1 >= pages, onclick: () => go(pages - 1)}, "last »"));
  }

  // ---- one group -----------------------------------------------------------------------------------
  async function groupView(run, id) {
    setCrumbs({text: "runs", href: "#/"}, {text: run, href: runLink(run)},
      {text: "groups", href: runLink(run, "/groups")}, {text: `group ${id}`});
    const g = await api(`/runs/${enc(run)}/groups/${id}`);
    let byReward = false;
    const list = h("div", {class: "samples"});
    const drawSamples = () => {
      const order = g.samples.map((s, i) => [s, i]);
      if (byReward) order.sort((a, b) => (b[0].reward ?? -Infinity) - (a[0].reward ?? -Infinity));
      put(list, ...order.map(([s, i]) => sampleCard(s, i, true)));
    };
    put(app,
      h("h1", null, `Step ${g.step}, group ${g.group_index}`),
      h("p", {class: "muted"}, `mean reward ${fmt(g.reward_mean)} · std ${fmt(g.reward_std)} · ${g.n_scored} of `
        + `${g.n_samples} scored · ${g.n_truncated} truncated`),
      h("div", {class: "links"}, h("a", {href: runLink(run, `/prompt/${g.id}`)}, "this prompt across steps"),
        h("a", {href: runLink(run, `/label${query({group: g.id})}`)}, "label this group yourself")),
      promptBlock(g, run),
      h("div", {class: "controls"}, h("label", null, h("input", {type: "checkbox", onchange: (ev) => {
        byReward = ev.target.checked; drawSamples();
      }}), " sort by reward")),
      groupImages(g).length ? h("div", {class: "with-images"}, thumbs(run, groupImages(g), "beside"), list) : list);
    drawSamples();
  }

  function promptBlock(g, run) {
    const extra = Object.keys(g.item || {}).length ? h("details", null, h("summary", null, "dataset fields"),
      h("pre", null, JSON.stringify(g.item, null, 2))) : null;
    return h("section", {class: "card prompt-block"},
      h("h3", null, "prompt"), thumbs(run, groupImages(g)), h("pre", {class: "text prompt"}, g.prompt),
      h("h3", null, "reference answer"), h("pre", {class: "text reference"}, g.reference ?? "(none)"), extra);
  }

  // ---- images of image prompts ---------------------------------------------------------------------
  // A stored group names its images by file name (item.images); the server sends only files of the run's
  // own images folder (GET /api/runs/RUN/images/FILE). Names go into the URL encoded, never into markup.
  function groupImages(g) {
    const names = (g.item || {}).images;
    return Array.isArray(names) ? names.filter((n) => typeof n === "string") : [];
  }

  function imageUrl(run, name) {
    return `/api/runs/${enc(run)}/images/${enc(name)}`;
  }

  function thumbs(run, names, cls) {
    if (!run || !names.length) return null;
    return h("div", {class: "thumbs" + (cls ? " " + cls : "")}, names.map((name, k) => h("img", {
      class: "thumb", src: imageUrl(run, name), alt: `image ${k + 1} of the prompt`, title: "click to enlarge",
      dataset: {image: name}, onclick: (ev) => { ev.stopPropagation(); ev.preventDefault(); enlarge(run, name); }})));
  }

  function enlarge(run, name) {
    const close = () => { box.remove(); document.removeEventListener("keydown", onKey); };
    const onKey = (ev) => { if (ev.key === "Escape") close(); };
    const box = h("div", {class: "lightbox", role: "dialog", onclick: close},
      h("img", {src: imageUrl(run, name), alt: "the image, enlarged"}), h("p", null, "click or press Escape to close"));
    document.addEventListener("keydown", onKey);
    window.addEventListener("hashchange", close, {once: true});
    document.body.appendChild(box);
  }

  // A sample with its text on the left and, beside it, every component's score, reason, error and
  // per-criterion sub-scores; `withScores` false hides the grader's view (blind labeling).
  function sampleCard(s, i, withScores, extra) {
    const meta = h("div", {class: "sample-meta"},
      h("span", {class: "idx"}, `#${i}`),
      withScores ? h("span", null, "reward ", h("b", {class: "reward"}, fmt(s.reward))) : null,
      withScores ? h("span", null, "advantage ", h("b", {class: "advantage"}, signed(s.advantage))) : null,
      h("span", {class: s.finish_reason === "length" ? "finish warn" : "finish"}, `finish ${s.finish_reason}`),
      h("span", null, `${s.completion_tokens} tokens`),
      s.policy_version == null ? null : h("span", {class: "policy", title: "async rollouts: the policy version " +
        "(optimizer steps taken) whose weights sampled it"}, `sampled by policy ${s.policy_version}`),
      s.episode ? episodeMeta(s) : null);
    return h("article", {class: "sample card" + (s.episode ? " is-episode" : ""), dataset: {index: i}}, meta,
      h("div", {class: "sample-body"}, s.episode ? episodeView(s, withScores) : sampleText(s.text, s.thinking_open),
        withScores ? scoresTable(s) : null),
      extra || null);
  }

  // ---- an agent's episode (kitae.rollout.trajectory): its turns, tool calls and the spans never trained ----
  // The stored sample has `episode` (turns [{start, end, text, finish_reason, malformed, tool_calls}], end,
  // environment_reward, template_rewrites), `trained_spans` ([start, end) completion tokens the loss saw) and
  // `sampled_tokens`; a single-turn sample has none of them and renders as before. Model text, tool arguments
  // and tool results are untrusted: text nodes only, as everywhere.
  function episodeMeta(s) {
    const end = s.episode.end || "answer";
    return [h("span", {class: "episode-end" + (end === "answer" ? "" : " warn")}, `episode end ${end}`),
      h("span", {class: "trained-count"}, `${s.sampled_tokens ?? s.completion_tokens} of ${s.completion_tokens} `
        + "tokens trained")];
  }

  // [start, end) spans of [0, n) outside `trained`: what the template and the tools put in.
  function untrainedSpans(trained, n) {
    const out = [];
    let at = 0;
    for (const [start, end] of trained) {
      if (start > at) out.push([at, start]);
      at = Math.max(at, end);
    }
    if (at < n) out.push([at, n]);
    return out;
  }

  // the objects of a stored list: a hand-edited run.db may hold anything there
  const arrayOf = (v) => (Array.isArray(v) ? v.filter((x) => x && typeof x === "object") : []);

  function episodeView(s, withScores) {
    const ep = s.episode, turns = arrayOf(ep.turns);
    const calls = turns.flatMap((t) => arrayOf(t.tool_calls));
    const errors = calls.filter((c) => c.error != null).length;
    const trained = Array.isArray(s.trained_spans) ? s.trained_spans.filter(Array.isArray)
      : turns.map((t) => [t.start, t.end]);  // (no mask stored: the turns are what was sampled)
    const gaps = untrainedSpans(trained, s.completion_tokens);
    const gapAfter = (end) => gaps.find((g) => g[0] === end);
    const shown = new Set();
    const blocks = turns.flatMap((t, k) => {
      const gap = gapAfter(t.end);
      if (gap) shown.add(gap);
      const results = arrayOf(t.tool_calls);
      return [turnBlock(t, k, k === 0 && s.thinking_open), gap ? untrainedBlock(gap, results)
        : results.length ? h("section", {class: "unsent"}, h("div", {class: "span-label"},
          "tool results the model never read (the episode ended)"), toolResults(results)) : null];
    });
    const rest = gaps.filter((g) => !shown.has(g)).map((g) => untrainedBlock(g, []));
    return h("div", {class: "episode"},
      h("div", {class: "episode-head muted small"}, `${turns.length} turn${turns.length === 1 ? "" : "s"} · `
        + `${calls.length} tool call${calls.length === 1 ? "" : "s"}`,
      errors ? h("span", {class: "tool-errors"}, ` · ${errors} tool error${errors === 1 ? "" : "s"}`) : null,
      withScores && ep.environment_reward != null ? ` · environment reward ${fmt(ep.environment_reward)}` : null),
      blocks, rest,
      ep.template_rewrites ? h("p", {class: "muted small rewrites"}, "The chat template renders earlier turns "
        + "otherwise than they were sampled; the sampled tokens were kept and trained.") : null);
  }

  function turnBlock(t, k, thinkingOpen) {
    return h("section", {class: "turn trained", dataset: {turn: k, start: t.start, end: t.end}},
      h("div", {class: "span-label"}, `turn ${k} · tokens [${t.start}, ${t.end}) · sampled, trained · finish `
        + `${t.finish_reason}`, t.malformed ? h("span", {class: "malformed"},
        ` · ${t.malformed} malformed tool call${t.malformed === 1 ? "" : "s"}`) : null),
      sampleText(t.text, thinkingOpen),
      arrayOf(t.tool_calls).map((c) => h("div", {class: "tool-call" + (c.error != null ? " failed" : ""),
        dataset: {tool: c.name}},
        h("span", {class: "tool-name"}, `call ${c.name}`),
        h("pre", {class: "text tool-args"}, typeof c.arguments === "string" ? c.arguments
          : JSON.stringify(c.arguments, null, 2)))));
  }

  // Tokens the policy did not sample (the tool results, the template's turn markers): shaded, never trained.
  function untrainedBlock([start, end], calls) {
    return h("section", {class: "untrained", dataset: {start, end},
      title: "not trained: the loss mask is 0 here (put in by the template and the tools)"},
    h("div", {class: "span-label"}, `tokens [${start}, ${end}) · not trained: tool results and template`),
    toolResults(calls));
  }

  function toolResults(calls) {
    return calls.map((c) => h("div", {class: "tool-result" + (c.error != null ? " failed" : ""),
      dataset: {tool: c.name}},
      h("span", {class: "tool-name"}, `${c.name} → `, h("span", {class: "muted small"}, `${fmt(c.seconds)} s`)),
      c.error != null ? h("pre", {class: "text tool-error", role: "alert"}, `error: ${c.error}`)
        : h("pre", {class: "text tool-output"}, c.result ?? "")));
  }

  // A completion's text. A reasoning model's leading <think>...</think> block (up to the last </think>, what
  // graders with `think: strip` skip) folds into a closed <details>, the answer after it shows as usual; the
  // thinking of one cut off before </think> folds the same way and it has no answer. `thinkingOpen`: the prompt
  // opened the block (the sample's thinking_open), so the text starts inside it, with no <think> of its own.
  // Text nodes only, as ever.
  function sampleText(text, thinkingOpen) {
    const t = String(text ?? ""), open = "<think>", close = "</think>";
    const lead = t.length - t.trimStart().length;
    if (!thinkingOpen && !t.startsWith(open, lead)) return h("pre", {class: "text sample-text"}, t);
    const start = thinkingOpen ? 0 : lead + open.length;  // where the thinking starts
    const end = t.lastIndexOf(close), closed = end >= start;
    const thinking = t.slice(start, closed ? end : t.length);
    const chars = [...thinking].length;  // code points, as kitae counts characters
    return h("div", {class: "sample-text with-thinking"},
      h("details", {class: "thinking"}, h("summary", null, `thinking (${chars} chars${closed ? "" : ", never closed"})`),
        h("pre", {class: "text thinking-text"}, thinking)),
      closed ? h("pre", {class: "text answer-text"}, t.slice(end + close.length).trimStart())
        : h("p", {class: "answer-text muted"}, "no answer: cut off while thinking"));
  }

  function scoresTable(s) {
    const names = [...new Set([...Object.keys(s.scores || {}), ...Object.keys(s.errors || {}),
      ...Object.keys(s.sub_scores || {})])];
    if (!names.length) return h("div", {class: "scores muted"}, "no component scores");
    return h("div", {class: "scores"}, names.map((name) => {
      const sub = (s.sub_scores || {})[name] || {};
      const reason = (s.reasons || {})[name], error = (s.errors || {})[name];
      return h("div", {class: "component", dataset: {component: name}},
        h("div", {class: "component-head"}, h("span", {class: "name"}, name),
          s.scores && s.scores[name] === null && !error ? h("span", {class: "score muted"}, "abstained")
            : h("b", {class: "score"}, name in (s.scores || {}) ? fmt(s.scores[name]) : "–")),
        Object.keys(sub).length ? criteriaTable(sub) : null,
        reason ? h("p", {class: "reason"}, reason) : null,
        error ? h("p", {class: "component-error"}, "error: ", error) : null);
    }));
  }

  // A judge's per-criterion scores (any JSON a grader put in sub_scores).
  function criteriaTable(sub) {
    const cell = (v) => (typeof v === "number" || v === null ? fmt(v) : JSON.stringify(v));
    return h("table", {class: "criteria"}, h("tbody", null, Object.entries(sub).map(([c, v]) =>
      h("tr", null, h("td", null, c), h("td", {class: "num"}, cell(v))))));
  }

  // ---- the same prompt across steps ----------------------------------------------------------------
  async function promptView(run, id, q) {
    setCrumbs({text: "runs", href: "#/"}, {text: run, href: runLink(run)}, {text: `group ${id}`,
      href: runLink(run, `/group/${id}`)}, {text: "prompt across steps"});
    const page = Number(q.get("page") || 0), limit = 10;
    const res = await api(`/runs/${enc(run)}/prompt/${id}${query({limit, offset: page * limit})}`);
    const pages = Math.max(1, Math.ceil(res.total / limit));
    const series = [{key: "mean reward", points: []}];
    const blocks = res.groups.map((g) => h("section", {class: "card history", dataset: {step: g.step}},
      h("h3", null, h("a", {href: runLink(run, `/group/${g.id}`)}, `step ${g.step}`),
        h("span", {class: "muted"}, ` · mean reward ${fmt(g.reward_mean)} · std ${fmt(g.reward_std)}`)),
      h("div", {class: "history-samples"}, g.samples.map((s, i) => h("div", {class: "history-sample"},
        h("div", {class: "sample-meta"}, h("span", {class: "idx"}, `#${i}`), h("b", null, fmt(s.reward)),
          h("span", {class: s.finish_reason === "length" ? "finish warn" : "finish"}, s.finish_reason),
          s.episode ? h("span", {class: "episode-turns"}, `episode of ${arrayOf(s.episode.turns).length} turns, `
            + `end ${s.episode.end}`) : null),
        sampleText(s.text, s.thinking_open))))));
    put(app, h("h1", null, "The same prompt across steps"),
      h("p", {class: "muted"}, `${res.total} times in this run, oldest first`),
      h("section", {class: "card prompt-block"}, h("h3", null, "prompt"), h("pre", {class: "text prompt"}, res.prompt),
        h("h3", null, "reference answer"), h("pre", {class: "text reference"}, res.reference ?? "(none)")),
      h("div", {class: "card", id: "history-chart"}, h("h3", null, "mean reward of this prompt at each step")),
      blocks, pager(page, pages, (p) => { location.hash = runLink(run, `/prompt/${id}${query({page: p})}`); }));
    series[0].points = res.rewards;
    chart(document.getElementById("history-chart"), {height: 160}).update(series);
  }

  // ---- two runs on one plot -------------------------------------------------------------------------
  async function compareView(q) {
    setCrumbs({text: "runs", href: "#/"}, {text: "compare"});
    const {runs} = await api("/runs");
    const names = runs.filter((r) => r.status !== "unreadable").map((r) => r.name);
    const a = q.get("a") || names[0] || "", b = q.get("b") || names.find((n) => n !== a) || "";
    const go = (change) => {
      location.hash = `#/compare${query(Object.assign({a, b, key: q.get("key") || ""}, change))}`;
    };
    const pick = (name, value) => h("select", {name, onchange: (ev) => go({[name]: ev.target.value})},
      names.map((n) => h("option", {value: n, selected: n === value}, n)));
    if (!a || !b) {
      put(app, h("h1", null, "Compare two runs"), h("p", null, "Comparing needs two runs."));
      return;
    }
    const [sa, sb] = await Promise.all([api(`/runs/${enc(a)}`), api(`/runs/${enc(b)}`)]);
    const keys = [...new Set([...sa.keys, ...sb.keys])];
    const key = q.get("key") || (keys.includes("reward") ? "reward" : keys[0] || "");
    const box = h("section", {class: "card", id: "compare-chart"}, h("h3", null, `${key}: ${a} vs ${b}`));
    put(app, h("h1", null, "Compare two runs"),
      h("div", {class: "controls"}, h("label", null, "run A ", pick("a", a)), h("label", null, "run B ", pick("b", b)),
        h("label", null, "metric ", h("select", {name: "key", onchange: (ev) => go({key: ev.target.value})},
          keys.map((k) => h("option", {value: k, selected: k === key}, k))))),
      box);
    const c = chart(box, {height: 320});
    const draw = async () => {
      // a run without this key has no series (the API answers an unknown key with an error)
      const series = (r, s) => (s.keys.includes(key) ? api(`/runs/${enc(r)}/metrics${query({keys: key, points: 1500})}`)
        : Promise.resolve({series: {}, evals: {}, status: s.status}));
      const [ra, rb] = await Promise.all([series(a, sa), series(b, sb)]);
      const pts = (res) => (res.series[key] || res.evals[key] || []);
      c.update([{key: `A:${key}`, label: `${a}`, points: pts(ra)}, {key: `B:${key}`, label: `${b}`, points: pts(rb)}]);
      return [ra.status, rb.status];
    };
    const statuses = await draw();
    if (statuses.includes("running")) every(state.config.poll_ms, draw);
  }

  // ---- labeling: your scores against the grader's -----------------------------------------------------
  async function labelView(run, q) {
    setCrumbs({text: "runs", href: "#/"}, {text: run, href: runLink(run)}, {text: "label"});
    const summary = await api(`/runs/${enc(run)}`);
    const components = summary.keys.filter((k) => k.startsWith("reward/")).map((k) => k.slice("reward/".length));
    let grader = q.get("grader") || "reward";
    const agreementBox = h("section", {class: "card agreement"});
    const groupBox = h("div");
    const graderSelect = h("select", {name: "grader", onchange: (ev) => { grader = ev.target.value; drawAgreement(); }},
      ["reward", ...components].map((c) => h("option", {value: c, selected: c === grader},
        c === "reward" ? "total reward" : `component ${c}`)));
    put(app, runHeader(run, summary, "label"),
      h("p", {class: "intro"}, "Score at least 30 answers yourself, then see whether the grader ranks them as "
        + "you do (with fewer, the verdict says they are too few to trust). "
        + "A grader that disagrees with you teaches the model its opinion, not yours. Grader scores stay hidden "
        + "until you save, so they cannot sway you. Your labels go to labels.jsonl in the run folder."),
      agreementBox, groupBox);
    const drawAgreement = async () => {
      const r = await api(`/runs/${enc(run)}/agreement${query({grader})}`);
      put(agreementBox, agreementCard(run, r, graderSelect));
    };
    let position = -1;
    const next = async () => {
      const res = await api(`/runs/${enc(run)}/label_queue${query({after: position})}`);
      position = res.position;
      return res.group;
    };
    const drawGroup = async (g) => {
      if (!g) {
        put(groupBox, h("p", {class: "muted"}, "No more groups to label."));
        return;
      }
      const {labels} = await api(`/runs/${enc(run)}/labels`);
      const mine = {};
      for (const l of labels) if (l.step === g.step && l.group_index === g.group_index) mine[l.sample_index] = l.score;
      labelGroup(run, g, mine, groupBox, {saved: drawAgreement, next: async () => drawGroup(await next())});
    };
    await drawAgreement();
    await drawGroup(q.get("group") ? await api(`/runs/${enc(run)}/groups/${Number(q.get("group"))}`) : await next());
  }

  function agreementCard(run, r, graderSelect) {
    const a = r.agreement;
    const stat = (name, v, cls) => h("div", {class: "stat " + (cls || "")}, h("div", {class: "muted small"}, name),
      h("b", null, v));
    return [h("h3", null, "Agreement with the grader"),
      h("div", {class: "controls"}, h("label", null, "grader score: ", graderSelect)),
      h("div", {class: "stats"}, stat("your labels", `${r.labels}`, r.labels < r.min_labels ? "warn" : ""),
        stat("pairwise (within group)", fmt(a.pairwise)), stat("Spearman", fmt(a.spearman)),
        stat("Kendall τ-b", fmt(a.kendall)), stat("pairs compared", `${a.pairs}`)),
      h("p", {class: "verdict verdict-" + r.verdict.split(":")[0].toLowerCase()}, r.verdict),
      r.labels ? h("p", {class: "small"}, h("a", {href: `/api/runs/${enc(run)}/labeled.jsonl`, download: ""},
        "download your labeled groups"), " to try another grader on them: ",
      h("code", null, "kitae grader validate --grader SPEC --data labeled.jsonl")) : null,
      r.worst.length ? h("div", null, h("h4", null, "Worst disagreements"),
        r.worst.map((d) => disagreement(run, d))) : null];
  }

  function disagreement(run, d) {
    const you = `you: #${d.better.sample_index} (${fmt(d.better.human)}) over #${d.worse.sample_index} `
      + `(${fmt(d.worse.human)}); grader: ${fmt(d.better.grader)} vs ${fmt(d.worse.grader)}`;
    return h("div", {class: "disagreement"},
      h("div", {class: "muted small"}, h("a", {href: runLink(run, `/group/${d.group_id}`)},
        `step ${d.step}, group ${d.group_index}`), " · ", you),
      h("div", {class: "pair"}, h("pre", {class: "text"}, clip(d.better.text, 400)),
        h("pre", {class: "text"}, clip(d.worse.text, 400))));
  }

  // One group to label: your score buttons under each sample; the grader's scores once you saved.
  function labelGroup(run, g, mine, box, on) {
    let revealed = false;
    const cards = h("div", {class: "samples"});
    const status = h("span", {class: "muted save-status"});
    const choose = (i, v) => { mine[i] = v; draw(); };
    const buttons = (i) => h("div", {class: "label-row"}, "your score: ",
      LABEL_SCALE.map((v) => h("button", {type: "button", class: "score-button" + (mine[i] === v ? " chosen" : ""),
        dataset: {score: v}, onclick: () => choose(i, v)}, String(v))),
      mine[i] != null ? h("button", {type: "button", class: "link", onclick: () => choose(i, null)}, "clear") : null);
    const draw = () => put(cards, g.samples.map((s, i) => sampleCard(s, i, revealed, buttons(i))));
    const save = async () => {
      const items = Object.entries(mine).map(([i, score]) => ({group_id: g.id, sample_index: Number(i), score}));
      if (!items.length) { status.textContent = "score at least one sample first"; return; }
      let r;
      try {
        r = await post(`/runs/${enc(run)}/labels`, {labels: items});
      } catch (e) {  // not saved (a read-only run folder, a full disk): say why, keep the scores to try again
        status.className = "save-status error";
        status.textContent = `not saved: ${e.message}`;
        return;
      }
      status.className = "muted save-status";
      status.textContent = `saved ${r.saved} labels to ${r.file}`;
      revealed = true;
      draw();
      await on.saved();
    };
    put(box, h("h2", null, `Step ${g.step}, group ${g.group_index}`), promptBlock(g, run),
      h("p", {class: "muted"}, "1 = bad … 5 = great; only the order within a group matters to GRPO."), cards,
      h("div", {class: "controls sticky"},
        h("button", {type: "button", class: "primary", onclick: save}, "Save my scores"),
        h("button", {type: "button", onclick: () => { revealed = !revealed; draw(); }}, "show / hide grader scores"),
        h("button", {type: "button", onclick: on.next}, "next group ›"), status));
    draw();
  }

  // ---- start ---------------------------------------------------------------------------------------
  window.addEventListener("hashchange", navigate);
  api("/config").then((c) => { state.config = c; }).catch(() => {}).finally(navigate);
})();
