"""The viewer page's HTML, CSS and JavaScript (one template; ui.py fills in the data).

Frames are DOM elements (class "frame", data-name, data-samples, aria-label), so the page can be
searched as text and checked by tests. window.hotstackUI is the page's API (used by its own
controls and by tests); window.hotstackFlamegraph keeps the older zoom/search API; the URL
fragment takes #zoom=NAME&search=TEXT.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  * { box-sizing: border-box; }
  body { font: 13px/1.35 system-ui, "DejaVu Sans", Verdana, sans-serif; margin: 0; color: #1f2328; background: #fff; }
  header { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; padding: 8px 12px 4px; }
  h1 { font-size: 16px; margin: 0; }
  #subtitle, #matched, #range-info, .muted { color: #59636e; }
  nav { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
  #toolbar { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; padding: 4px 12px; }
  #toolbar select, #toolbar input, #toolbar button, nav select, nav input, nav button { font: inherit; }
  #search { width: 220px; }
  button, .button { padding: 2px 8px; border: 1px solid #aab; border-radius: 4px; background: #f6f8fa;
                    color: inherit; text-decoration: none; cursor: pointer; }
  button.active { background: #ffe8b3; border-color: #d4a72c; }
  #timeline-box { padding: 2px 12px 0; }
  #timeline { width: 100%; height: 84px; display: block; background: #f6f8fa; border: 1px solid #d1d9e0;
              cursor: crosshair; user-select: none; }
  #legend { display: flex; gap: 12px; flex-wrap: wrap; min-height: 18px; padding: 2px 0; }
  .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
  #panes { display: flex; gap: 12px; padding: 4px 12px 12px; align-items: flex-start; }
  #flame-pane { flex: 1 1 62%; min-width: 0; }
  #table-pane { flex: 0 0 38%; max-width: 600px; max-height: calc(100vh - 230px); min-height: 200px; overflow: auto;
                border: 1px solid #d1d9e0; }
  #details { min-height: 18px; color: #333; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  #graph { position: relative; overflow: hidden; }
  .frame { position: absolute; height: 17px; border: 1px solid #fff; overflow: hidden; white-space: nowrap;
           text-overflow: ellipsis; cursor: pointer; padding-left: 2px; font-size: 11px; line-height: 15px; }
  .frame:hover { border-color: #000; }
  .frame.match { background: #e040e0 !important; }
  .frame.selected { outline: 2px solid #0550ae; z-index: 1; }
  table { border-collapse: collapse; width: 100%; font-size: 12px; }
  th { position: sticky; top: 0; background: #eaeef2; cursor: pointer; text-align: right; padding: 3px 6px;
       white-space: nowrap; }
  th:first-child, td:first-child { text-align: left; }
  td { padding: 2px 6px; text-align: right; border-bottom: 1px solid #eef; white-space: nowrap; }
  td:first-child { max-width: 0; width: 100%; overflow: hidden; text-overflow: ellipsis; }   /* what is left */
  tr.fn:hover { background: #f0f6ff; cursor: pointer; }
  tr.fn.selected { background: #dbeafe; }
  .up { color: #cf222e; } .down { color: #1a7f37; }
  #tooltip { position: fixed; pointer-events: none; background: #ffffe0; border: 1px solid #888; padding: 3px 6px;
             display: none; z-index: 10; max-width: 600px; word-break: break-all; }
</style>
</head>
<body>
<header>
  <h1>__TITLE__</h1><span id="subtitle">__SUBTITLE__</span>
  <nav>__NAV__</nav>
</header>
<div id="toolbar">
  <input id="search" type="search" placeholder="Search (regexp)" aria-label="search frames">
  <span id="matched"></span>
  <span id="filters"></span>
  <button id="reset" type="button">Reset zoom</button>
  <button id="compare" type="button" title="select range A on the timeline, press Compare, then select range B">Compare</button>
  <button id="clear-range" type="button">All time</button>
  <span class="muted">Download:</span>
  <a id="dl-pprof" class="button" href="#" download="profile.pb">pprof</a>
  <a id="dl-folded" class="button" href="#" download="profile.folded">folded</a>
</div>
<section id="timeline-box">
  <svg id="timeline" aria-label="samples over time" role="img"></svg>
  <div id="legend"></div>
  <div id="range-info"></div>
</section>
<main id="panes">
  <section id="flame-pane"><div id="details"></div><div id="graph" role="tree"></div></section>
  <section id="table-pane">
    <table id="functions" aria-label="top functions">
      <thead><tr id="functions-head"></tr></thead><tbody id="functions-body"></tbody>
    </table>
  </section>
</main>
<div id="tooltip"></div>
<script id="page-config" type="application/json">__CONFIG__</script>
<script id="profile-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var ROW = 17, SVGNS = "http://www.w3.org/2000/svg";
  var D = JSON.parse(document.getElementById("profile-data").textContent);
  var C = JSON.parse(document.getElementById("page-config").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var graph = $("graph"), tooltip = $("tooltip"), details = $("details"), matched = $("matched"), search = $("search");
  var S = { filters: {}, rangeA: null, rangeB: null, picking: false, zoomed: null, pattern: null,
            selected: null, sort: "self", root: null, diff: false };
  var tMin = Infinity, tMax = -Infinity;
  D.slices.forEach(function (s) { tMin = Math.min(tMin, s[0]); tMax = Math.max(tMax, s[0] + s[1]); });
  if (!isFinite(tMin)) { tMin = 0; tMax = 1; }
  function frameName(f) { return D.names[D.frames[f][0]]; }
  function frameKind(f) { return D.frames[f][1]; }

  // -- selecting samples ------------------------------------------------------------------------
  function labelsPass(li) {
    var labels = D.labels[li];
    for (var k in S.filters) if (S.filters[k] !== "" && labels[k] !== S.filters[k]) return false;
    return true;
  }
  function inRange(s, r) { return !r || (s[0] < r[1] && s[0] + s[1] > r[0]); }
  // stack id -> value over the slices in range r that pass the label filters
  function counts(r) {
    var out = new Map();
    D.slices.forEach(function (s) {
      if (!inRange(s, r) || !labelsPass(s[2])) return;
      s[3].forEach(function (e) { out.set(e[0], (out.get(e[0]) || 0) + e[1]); });
    });
    return out;
  }

  // -- the tree: node = {name, kind, a, b, children[], parent, depth}; a is the base (or only) value
  function newNode(name, kind, parent) {
    return {name: name, kind: kind, a: 0, b: 0, kids: new Map(), children: [], parent: parent,
            depth: parent ? parent.depth + 1 : 0};
  }
  function addCounts(root, m, field) {
    m.forEach(function (v, sid) {
      var node = root; root[field] += v;
      D.stacks[sid].forEach(function (f) {
        var child = node.kids.get(f);
        if (!child) { child = newNode(frameName(f), frameKind(f), node); node.kids.set(f, child); }
        child[field] += v; node = child;
      });
    });
  }
  function freeze(node) {
    node.children = Array.from(node.kids.values());
    node.children.forEach(freeze);
    node.children.sort(function (x, y) { return weight(y) - weight(x) || (x.name < y.name ? -1 : 1); });
  }
  var totA = 1, totB = 1;
  // What a frame's width stands for: its samples, or in a diff the mean of its shares of A and B.
  function weight(n) { return S.diff ? (n.a / totA + n.b / totB) / 2 : n.a; }
  function build() {
    var root = newNode("all", 2, null);
    S.diff = !!(S.rangeA && S.rangeB);
    if (S.diff) {
      addCounts(root, counts(S.rangeA), "a");
      addCounts(root, counts(S.rangeB), "b");
      totA = root.a || 1; totB = root.b || 1;
    } else {
      addCounts(root, counts(S.rangeA), "a");
      totA = root.a || 1;
    }
    freeze(root);
    S.root = root;
    if (S.zoomed) S.zoomed = findPath(root, pathOf(S.zoomed));
  }
  function pathOf(n) { var p = []; for (; n && n.parent; n = n.parent) p.unshift(n.name + "\u0000" + n.kind); return p; }
  function findPath(root, path) {
    var n = root;
    for (var i = 0; i < path.length; i++) {
      var next = null;
      for (var j = 0; j < n.children.length; j++)
        if (n.children[j].name + "\u0000" + n.children[j].kind === path[i]) { next = n.children[j]; break; }
      if (!next) return null;
      n = next;
    }
    return n === root ? null : n;
  }

  // -- the flame graph ----------------------------------------------------------------------------
  function pct(v, t) { return (100 * v / (t || 1)).toFixed(2) + "%"; }
  function label(n) {
    if (!S.diff) return n.name + " (" + n.a + " samples, " + pct(n.a, totA) + ")";
    var d = 100 * (n.b / totB - n.a / totA);
    return n.name + " (A " + pct(n.a, totA) + ", B " + pct(n.b, totB) + ", " + (d >= 0 ? "+" : "") + d.toFixed(2) + " pts)";
  }
  function hash(name) { var h = 0; for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0; return h; }
  function color(n) {
    if (S.diff && n.kind !== 2) {
      var d = n.b / totB - n.a / totA, scale = Math.min(1, Math.abs(d) * 8);
      if (Math.abs(d) < 0.0005) return "hsl(0,0%,86%)";
      return d > 0 ? "hsl(0,75%," + (88 - 38 * scale) + "%)" : "hsl(130,55%," + (86 - 40 * scale) + "%)";
    }
    var h = hash(n.name);
    if (n.kind === 2) return "hsl(210,40%," + (72 + h % 12) + "%)";
    if (n.kind === 1) return "hsl(" + (10 + h % 25) + ",75%," + (62 + h % 10) + "%)";
    return "hsl(" + (30 + h % 30) + ",85%," + (55 + h % 12) + "%)";
  }
  function value(n) { return S.diff ? n.a + n.b : n.a; }
  function renderGraph() {
    var root = S.root, focus = S.zoomed || root, width = graph.clientWidth || 900;
    var boxes = [], maxDepth = 0, chain = [];
    for (var a = focus; a; a = a.parent) chain.unshift(a);
    chain.forEach(function (n) { boxes.push([n, 0, width]); });
    (function lay(node, x, w) {
      var cx = x, nw = weight(node) || 1;
      for (var i = 0; i < node.children.length; i++) {
        var c = node.children[i], cw = w * weight(c) / nw;
        if (cw >= 0.5) { boxes.push([c, cx, cw]); lay(c, cx, cw); }
        cx += cw;
      }
    })(focus, 0, width);
    boxes.forEach(function (b) { if (b[0].depth > maxDepth) maxDepth = b[0].depth; });
    graph.textContent = "";
    graph.style.height = ((maxDepth + 1) * ROW) + "px";
    var frag = document.createDocumentFragment();
    boxes.forEach(function (b) {
      var node = b[0], el = document.createElement("div");
      el.className = "frame";
      el.setAttribute("aria-label", label(node));
      el.setAttribute("data-name", node.name);
      el.setAttribute("data-samples", value(node));
      el.setAttribute("role", "treeitem");
      // Root at the top (an icicle): on a page the root and the zoom path stay in view however
      // deep the stacks are.
      el.style.left = b[1] + "px";
      el.style.width = b[2] + "px";
      el.style.top = (node.depth * ROW) + "px";
      el.style.background = color(node);
      if (b[2] >= 14) el.textContent = node.name;   // narrow frames get what fits, with an ellipsis
      el.node = node;
      if (S.pattern && node !== root && S.pattern.test(node.name)) el.classList.add("match");
      if (S.selected !== null && node.name === S.selected) el.classList.add("selected");
      frag.appendChild(el);
    });
    graph.appendChild(frag);
    graph.setAttribute("data-zoom", focus.name);
    graph.setAttribute("data-mode", S.diff ? "diff" : "single");
    details.textContent = S.zoomed ? "Zoomed into " + label(S.zoomed) + " (click it or Esc to zoom out)"
                                   : (S.diff ? "Diff: red grew from A to B, green shrank (width: mean share)" : "");
  }
  function updateMatches() {
    if (!S.pattern) { matched.textContent = ""; return; }
    var sum = 0, root = S.root;
    (function walk(n) {
      if (n !== root && S.pattern.test(n.name)) { sum += n.a; return; }
      n.children.forEach(walk);
    })(root);
    matched.textContent = "Matched: " + pct(sum, totA);
  }

  // -- the table of functions (of the zoomed subtree) -------------------------------------------------
  function functions() {
    var fns = new Map(), focus = S.zoomed || S.root;
    function row(name, kind) {
      var r = fns.get(name);
      if (!r) { r = {name: name, kind: kind, selfA: 0, totalA: 0, selfB: 0, totalB: 0}; fns.set(name, r); }
      return r;
    }
    (function walk(n, onStack) {
      var selfA = n.a, selfB = n.b;
      n.children.forEach(function (c) { selfA -= c.a; selfB -= c.b; });
      if (n.kind !== 2) {
        var r = row(n.name, n.kind);
        r.selfA += selfA; r.selfB += selfB;
        if (!onStack.has(n.name)) { r.totalA += n.a; r.totalB += n.b; }
      }
      var added = n.kind !== 2 && !onStack.has(n.name);
      if (added) onStack.add(n.name);
      n.children.forEach(function (c) { walk(c, onStack); });
      if (added) onStack.delete(n.name);
    })(focus, new Set());
    return Array.from(fns.values());
  }
  function renderTable() {
    var head = $("functions-head"), body = $("functions-body");
    var cols = S.diff ? [["name", "Function"], ["selfA", "Self A"], ["selfB", "Self B"], ["delta", "\u0394 self"],
                         ["totalB", "Total B"]]
                      : [["name", "Function"], ["self", "Self"], ["selfPct", "Self %"], ["total", "Total"],
                         ["totalPct", "Total %"]];
    head.textContent = "";
    cols.forEach(function (c) {
      var th = document.createElement("th");
      th.textContent = c[1] + (S.sort === c[0] ? " \u25be" : "");
      th.setAttribute("data-sort", c[0]);
      head.appendChild(th);
    });
    var rows = functions().filter(function (r) {
      return r.selfA + r.totalA + r.selfB + r.totalB > 0 && (!S.pattern || S.pattern.test(r.name));
    });
    var key = {
      name: function (r) { return r.name; }, self: function (r) { return r.selfA; }, selfPct: function (r) { return r.selfA; },
      total: function (r) { return r.totalA; }, totalPct: function (r) { return r.totalA; },
      selfA: function (r) { return r.selfA / totA; }, selfB: function (r) { return r.selfB / totB; },
      delta: function (r) { return Math.abs(r.selfB / totB - r.selfA / totA); }, totalB: function (r) { return r.totalB / totB; }
    }[S.sort] || function (r) { return S.diff ? Math.abs(r.selfB / totB - r.selfA / totA) : r.selfA; };
    rows.sort(function (x, y) {
      if (S.sort === "name") return x.name < y.name ? -1 : x.name > y.name ? 1 : 0;
      return key(y) - key(x) || (x.name < y.name ? -1 : 1);
    });
    body.textContent = "";
    var frag = document.createDocumentFragment();
    rows.slice(0, 500).forEach(function (r) {
      var tr = document.createElement("tr");
      tr.className = "fn" + (r.name === S.selected ? " selected" : "");
      tr.setAttribute("data-name", r.name);
      var cells = S.diff ? [r.name, pct(r.selfA, totA), pct(r.selfB, totB), null, pct(r.totalB, totB)]
                         : [r.name, r.selfA, pct(r.selfA, totA), r.totalA, pct(r.totalA, totA)];
      cells.forEach(function (v, i) {
        var td = document.createElement("td");
        if (v === null) {
          var d = 100 * (r.selfB / totB - r.selfA / totA);
          td.textContent = (d >= 0 ? "+" : "") + d.toFixed(2);
          td.className = d > 0.005 ? "up" : d < -0.005 ? "down" : "";
        } else td.textContent = v;
        if (i === 0) { td.title = r.name + (r.kind === 1 ? " [kernel]" : ""); }
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    });
    body.appendChild(frag);
    body.setAttribute("data-rows", rows.length);
  }

  // -- the timeline -------------------------------------------------------------------------------------
  var svg = $("timeline"), PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
                                        "#ff9da7", "#9c755f"];
  var series = [];
  function fmt(ms) {
    var d = new Date(ms), p = function (x) { return (x < 10 ? "0" : "") + x; };
    return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }
  function renderTimeline() {
    var W = svg.clientWidth || 1000, H = svg.clientHeight || 84, bins = Math.max(1, Math.min(160, Math.floor(W / 6)));
    var span = Math.max(1, tMax - tMin), per = span / bins;
    var key = C.series || "comm", totals = new Map();
    D.slices.forEach(function (s) {
      if (!labelsPass(s[2])) return;
      var name = D.labels[s[2]][key] || "?", v = 0;
      s[3].forEach(function (e) { v += e[1]; });
      totals.set(name, (totals.get(name) || 0) + v);
    });
    series = Array.from(totals.keys()).sort(function (x, y) { return totals.get(y) - totals.get(x); });
    var top = series.slice(0, PALETTE.length - 1), idx = new Map();
    top.forEach(function (n, i) { idx.set(n, i); });
    var grid = [];
    for (var b = 0; b < bins; b++) grid.push(new Array(top.length + 1).fill(0));
    D.slices.forEach(function (s) {
      if (!labelsPass(s[2])) return;
      var name = D.labels[s[2]][key] || "?", k = idx.has(name) ? idx.get(name) : top.length, v = 0;
      s[3].forEach(function (e) { v += e[1]; });
      // A slice spread evenly over the bins it covers.
      var b0 = Math.min(bins - 1, Math.floor((s[0] - tMin) / per)),
          b1 = Math.min(bins - 1, Math.max(b0, Math.ceil((s[0] + s[1] - tMin) / per) - 1));
      for (var bb = b0; bb <= b1; bb++) grid[bb][k] += v / (b1 - b0 + 1);
    });
    var max = 1;
    grid.forEach(function (g) { var t = g.reduce(function (x, y) { return x + y; }, 0); if (t > max) max = t; });
    svg.textContent = "";
    var bw = W / bins;
    grid.forEach(function (g, bi) {
      var y = H - 14;
      g.forEach(function (v, k) {
        if (!v) return;
        var h = (H - 18) * v / max, r = document.createElementNS(SVGNS, "rect");
        r.setAttribute("x", bi * bw); r.setAttribute("width", Math.max(1, bw - 1));
        r.setAttribute("y", y - h); r.setAttribute("height", h);
        r.setAttribute("fill", PALETTE[k === top.length ? PALETTE.length - 1 : k]);
        r.setAttribute("class", "bar");
        y -= h;
        svg.appendChild(r);
      });
    });
    [[2, "start", fmt(tMin)], [W - 2, "end", fmt(tMax)]].forEach(function (t) {
      var tx = document.createElementNS(SVGNS, "text");
      tx.setAttribute("x", t[0]); tx.setAttribute("y", H - 3); tx.setAttribute("text-anchor", t[1]);
      tx.setAttribute("font-size", "10"); tx.setAttribute("fill", "#59636e"); tx.textContent = t[2];
      svg.appendChild(tx);
    });
    [["A", S.rangeA, "rgba(9,105,218,0.18)", "#0969da"], ["B", S.rangeB, "rgba(212,167,44,0.25)", "#9a6700"]]
      .forEach(function (sel) {
        if (!sel[1]) return;
        var x0 = (sel[1][0] - tMin) / span * W, x1 = (sel[1][1] - tMin) / span * W, r = document.createElementNS(SVGNS, "rect");
        r.setAttribute("x", x0); r.setAttribute("width", Math.max(1, x1 - x0)); r.setAttribute("y", 0);
        r.setAttribute("height", H); r.setAttribute("fill", sel[2]); r.setAttribute("stroke", sel[3]);
        r.setAttribute("class", "range range-" + sel[0]);
        svg.appendChild(r);
      });
    var legend = $("legend");
    legend.textContent = "";
    top.concat(series.length > top.length ? ["other"] : []).forEach(function (n, i) {
      var span_ = document.createElement("span"), sw = document.createElement("span");
      sw.className = "swatch"; sw.style.background = PALETTE[i < top.length ? i : PALETTE.length - 1];
      span_.appendChild(sw); span_.appendChild(document.createTextNode(n));
      span_.setAttribute("data-series", n);
      legend.appendChild(span_);
    });
    var info = [];
    if (S.rangeA) info.push("A: " + fmt(S.rangeA[0]) + "\u2013" + fmt(S.rangeA[1]) + " (" + S.root.a + " samples)");
    if (S.rangeB) info.push("B: " + fmt(S.rangeB[0]) + "\u2013" + fmt(S.rangeB[1]) + " (" + S.root.b + " samples)");
    if (S.picking) info.push("select range B on the timeline");
    $("range-info").textContent = info.length ? info.join("   ") : "All " + S.root.a + " samples; drag on the timeline to select a time range.";
    $("compare").classList.toggle("active", S.picking || S.diff);
  }
  function timeAt(clientX) {
    var r = svg.getBoundingClientRect();
    return tMin + Math.max(0, Math.min(1, (clientX - r.left) / r.width)) * (tMax - tMin);
  }
  var drag = null;
  svg.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, t: timeAt(ev.clientX)}; ev.preventDefault(); });
  window.addEventListener("mouseup", function (ev) {
    if (!drag) return;
    var t = timeAt(ev.clientX), d = drag; drag = null;
    if (Math.abs(ev.clientX - d.x) < 3) return;
    var r = [Math.min(d.t, t), Math.max(d.t, t)];
    if (S.picking) { S.rangeB = r; S.picking = false; } else { S.rangeA = r; S.rangeB = null; }
    update();
  });

  // -- filters, search, selection ------------------------------------------------------------------------
  (function filtersUI() {
    var box = $("filters");
    D.filters.forEach(function (key) {
      var values = new Set();
      D.labels.forEach(function (l) { if (l[key] !== undefined) values.add(l[key]); });
      if (values.size < 2 && key !== C.series) return;
      var sel = document.createElement("select");
      sel.setAttribute("data-label", key);
      sel.setAttribute("aria-label", "filter by " + key);
      var all = document.createElement("option"); all.value = ""; all.textContent = key + ": all"; sel.appendChild(all);
      Array.from(values).sort().forEach(function (v) {
        var o = document.createElement("option"); o.value = v; o.textContent = key + ": " + v; sel.appendChild(o);
      });
      sel.addEventListener("change", function () { S.filters[key] = sel.value; update(); });
      box.appendChild(sel);
    });
  })();
  function select(name, scroll) {
    S.selected = name;
    renderGraph(); renderTable();
    var row = document.querySelector('tr.fn.selected');
    if (row && scroll) row.scrollIntoView({block: "nearest"});
  }
  graph.addEventListener("click", function (ev) {
    var el = ev.target.closest(".frame");
    if (!el) return;
    var n = el.node;
    S.zoomed = (n === S.root || n === S.zoomed) ? (n === S.zoomed && n.parent && n.parent !== S.root ? n.parent : null) : n;
    S.selected = n.kind === 2 ? null : n.name;
    update(true);
  });
  $("functions-body").addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.fn");
    if (tr) select(tr.getAttribute("data-name") === S.selected ? null : tr.getAttribute("data-name"), false);
  });
  $("functions-head").addEventListener("click", function (ev) {
    var th = ev.target.closest("th");
    if (th) { S.sort = th.getAttribute("data-sort"); renderTable(); }
  });
  graph.addEventListener("mousemove", function (ev) {
    var el = ev.target.closest(".frame");
    if (!el) { tooltip.style.display = "none"; return; }
    tooltip.textContent = label(el.node);
    tooltip.style.display = "block";
    tooltip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 320) + "px";
    tooltip.style.top = (ev.clientY + 14) + "px";
  });
  graph.addEventListener("mouseleave", function () { tooltip.style.display = "none"; });
  search.addEventListener("input", function () {
    try { S.pattern = search.value ? new RegExp(search.value) : null; } catch (e) { S.pattern = null; }
    updateMatches(); renderGraph(); renderTable();
  });
  $("reset").addEventListener("click", function () { S.zoomed = null; update(); });
  $("compare").addEventListener("click", function () {
    if (S.diff || S.picking) { S.rangeB = null; S.picking = false; }
    else if (S.rangeA) S.picking = true;
    else { S.rangeA = [tMin, tMin + (tMax - tMin) / 2]; S.picking = true; }
    update();
  });
  $("clear-range").addEventListener("click", function () { S.rangeA = S.rangeB = null; S.picking = false; update(); });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { S.zoomed = null; update(); }
  });
  window.addEventListener("resize", function () { renderGraph(); renderTimeline(); });

  // -- downloads: folded and pprof (profile.proto, built here) ---------------------------------------
  function selection() { return counts(S.diff ? S.rangeB : S.rangeA); }
  function folded() {
    var lines = [];
    selection().forEach(function (v, sid) {
      lines.push(D.stacks[sid].map(function (f) {
        return frameName(f).replace(/;/g, ":") + (frameKind(f) === 1 ? "_[k]" : "");
      }).join(";") + " " + v);
    });
    return lines.sort().join("\n") + (lines.length ? "\n" : "");
  }
  function Proto() { this.b = []; }
  Proto.prototype.varint = function (n) {
    while (n >= 128) { this.b.push((n % 128) | 128); n = Math.floor(n / 128); }
    this.b.push(n); return this;
  };
  Proto.prototype.int = function (field, n) { return this.varint(field * 8).varint(n); };
  Proto.prototype.bytes = function (field, bytes) {
    this.varint(field * 8 + 2).varint(bytes.length);
    for (var i = 0; i < bytes.length; i++) this.b.push(bytes[i]);
    return this;
  };
  Proto.prototype.msg = function (field, m) { return this.bytes(field, m.b); };
  Proto.prototype.packed = function (field, ns) { var p = new Proto(); ns.forEach(function (n) { p.varint(n); }); return this.bytes(field, p.b); };
  function pprof() {
    var enc = new TextEncoder(), strings = [""], sidx = new Map([["", 0]]);
    function str(s) { if (!sidx.has(s)) { sidx.set(s, strings.length); strings.push(s); } return sidx.get(s); }
    var out = new Proto(), period = C.frequency_hz ? Math.round(1e9 / C.frequency_hz) : 1;
    out.msg(1, new Proto().int(1, str("samples")).int(2, str("count")));
    var funcs = new Map(), locs = new Map(), r = S.diff ? S.rangeB : S.rangeA;
    selection().forEach(function (v, sid) {
      var stack = D.stacks[sid], ids = [], root = null;
      for (var i = stack.length - 1; i >= 0; i--) {
        var f = stack[i];
        if (frameKind(f) === 2) { root = frameName(f); continue; }
        if (!locs.has(f)) {
          var name = frameName(f) + (frameKind(f) === 1 ? " [k]" : "");
          if (!funcs.has(name)) funcs.set(name, funcs.size + 1);
          locs.set(f, [locs.size + 1, funcs.get(name)]);
        }
        ids.push(locs.get(f)[0]);
      }
      var s = new Proto().packed(1, ids).packed(2, [v]);
      if (root !== null) s.msg(3, new Proto().int(1, str(C.series || "comm")).int(2, str(root)));
      out.msg(2, s);
    });
    locs.forEach(function (l) { out.msg(4, new Proto().int(1, l[0]).msg(4, new Proto().int(1, l[1]))); });
    funcs.forEach(function (id, name) { out.msg(5, new Proto().int(1, id).int(2, str(name)).int(3, str(name))); });
    var t0 = r ? r[0] : tMin, t1 = r ? r[1] : tMax;
    var cpu = str("cpu"), ns = str("nanoseconds");
    strings.forEach(function (s) { out.bytes(6, enc.encode(s)); });
    out.int(9, Math.round(t0) * 1e6).int(10, Math.round(t1 - t0) * 1e6);
    out.msg(11, new Proto().int(1, cpu).int(2, ns)).int(12, period);
    return new Uint8Array(out.b);
  }
  function offer(a, bytes, type) {
    if (a.href.indexOf("blob:") === 0) URL.revokeObjectURL(a.href);
    a.href = URL.createObjectURL(new Blob([bytes], {type: type}));
  }
  $("dl-pprof").addEventListener("click", function () { offer(this, pprof(), "application/octet-stream"); });
  $("dl-folded").addEventListener("click", function () { offer(this, folded(), "text/plain"); });

  // -- everything ----------------------------------------------------------------------------------------
  function update(scroll) {
    build(); updateMatches(); renderGraph(); renderTable(); renderTimeline();
    if (scroll) { var row = document.querySelector("tr.fn.selected"); if (row) row.scrollIntoView({block: "nearest"}); }
  }
  function findWidest(name) {
    var best = null;
    (function walk(n) { if (n.name === name && (!best || value(n) > value(best))) best = n; n.children.forEach(walk); })(S.root);
    return best;
  }
  window.hotstackUI = {
    zoom: function (name) { var n = findWidest(name); S.zoomed = n === S.root ? null : n; S.selected = n ? name : null; update(true); return !!n; },
    search: function (text) { search.value = text; search.dispatchEvent(new Event("input")); return matched.textContent; },
    select: function (name) { select(name, true); },
    range: function (a, b) { S.rangeA = a; S.rangeB = b || null; S.picking = false; update(); },
    filter: function (key, v) { S.filters[key] = v; var s = document.querySelector('select[data-label="' + key + '"]'); if (s) s.value = v; update(); },
    bounds: function () { return [tMin, tMax]; },
    state: function () {
      return {diff: S.diff, picking: S.picking, rangeA: S.rangeA, rangeB: S.rangeB, zoom: S.zoomed ? S.zoomed.name : null,
              selected: S.selected, totalA: S.root.a, totalB: S.root.b, series: series};
    },
    folded: folded,
    pprofBase64: function () { var b = pprof(), s = ""; for (var i = 0; i < b.length; i++) s += String.fromCharCode(b[i]); return btoa(s); }
  };
  window.hotstackFlamegraph = {zoom: window.hotstackUI.zoom, search: window.hotstackUI.search};
  update();
  // Links into the page: #zoom=NAME clicks the widest frame of that name, #search=TEXT searches.
  (location.hash || "").replace(/^#/, "").split("&").forEach(function (part) {
    var eq = part.indexOf("="), key = part.slice(0, eq), v = decodeURIComponent(part.slice(eq + 1));
    if (key === "search") window.hotstackUI.search(v);
    if (key === "zoom") {
      var best = null;
      graph.querySelectorAll(".frame").forEach(function (el) {
        if (el.node.name === v && (!best || value(el.node) > value(best.node))) best = el;
      });
      if (best) best.dispatchEvent(new MouseEvent("click", {bubbles: true}));
    }
  });
})();
</script>
</body>
</html>
"""
