"""The one flame tree, and Profile -> one self-contained HTML flame graph (works offline: no external
script, font or style).

Interactive: click a frame to zoom into it (click the root or press Esc to zoom out), type in the
search box to highlight matching frames (their share of the total is shown), hover for the frame's
samples and percentage. Frames are DOM elements, so the page can be searched and tested as text.
Roots are the command names, then user frames from the outermost in, then kernel frames.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping

from .model import Profile

# A node: [name, value, kind, children]; kind 0 = user, 1 = kernel, 2 = comm (root level).
_USER, _KERNEL, _COMM = 0, 1, 2
Path = list[tuple[str, int]]     # (name, kind) from the root down


def build_tree(paths: Iterable[tuple[Path, int]]) -> list:
    """The one flame tree: (path root first, value) pairs -> [name, value, kind, children] nodes,
    children widest first (then by name)."""
    root: list = ["all", 0, _COMM, {}]
    for path, value in paths:
        root[1] += value
        node = root
        for name, kind in path:
            children = node[3]
            child = children.get((name, kind))
            if child is None:
                child = children[(name, kind)] = [name, 0, kind, {}]
            child[1] += value
            node = child
    return _freeze(root)


def profile_paths(profile: Profile) -> Iterable[tuple[Path, int]]:
    """A Profile's stacks as paths: command name, then user frames from the outermost, then kernel."""
    for sample in profile.samples:
        yield ([(sample.comm or "?", _COMM)] + [(f.name, _KERNEL if f.is_kernel else _USER)
                                                for f in reversed(sample.stack)], sample.value)


def folded_paths(folded: Mapping[str, int]) -> Iterable[tuple[Path, int]]:
    """Folded stacks (`root;...;leaf` -> value) as paths."""
    for stack, value in folded.items():
        yield [(name, _USER) for name in stack.split(";")], value


def as_dict(node: list) -> dict:
    """A tree node as {n: name, v: value, c: [children]} (the agent's /flamegraph?format=json)."""
    return {"n": node[0], "v": node[1], "c": [as_dict(c) for c in node[3]]}


def _freeze(node: list) -> list:
    children = sorted(node[3].values(), key=lambda c: (-c[1], c[0]))
    return [node[0], node[1], node[2], [_freeze(c) for c in children]]


def render_flamegraph(profile: Profile, title: str = "hotstack CPU flame graph") -> str:
    tree = build_tree(profile_paths(profile))
    subtitle = (f"{profile.total} samples at {profile.frequency_hz} Hz over {profile.duration_ns / 1e9:.1f} s"
                if profile.frequency_hz else f"{profile.total} samples")
    data = json.dumps(tree, separators=(",", ":")).replace("</", "<\\/")
    return (_TEMPLATE.replace("__TITLE__", html.escape(title)).replace("__SUBTITLE__", html.escape(subtitle))
            .replace("__DATA__", data))


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
  body { font: 12px/1.3 Verdana, Arial, sans-serif; margin: 8px; background: #fff; color: #222; }
  header { display: flex; gap: 16px; align-items: baseline; flex-wrap: wrap; }
  h1 { font-size: 16px; margin: 0; }
  #subtitle, #matched { color: #555; }
  #search { width: 240px; }
  #graph { position: relative; margin-top: 8px; overflow: hidden; }
  .frame { position: absolute; height: 17px; box-sizing: border-box; border: 1px solid #fff;
           overflow: hidden; white-space: nowrap; cursor: pointer; padding-left: 2px; font-size: 11px; }
  .frame:hover { border-color: #000; }
  .frame.match { background: #e040e0 !important; }
  #tooltip { position: fixed; pointer-events: none; background: #ffffe0; border: 1px solid #888;
             padding: 3px 6px; display: none; z-index: 10; max-width: 600px; word-break: break-all; }
  #details { margin-top: 6px; min-height: 16px; color: #333; }
</style>
</head>
<body>
<header>
  <h1>__TITLE__</h1><span id="subtitle">__SUBTITLE__</span>
  <input id="search" type="search" placeholder="Search (regexp)" aria-label="search frames">
  <button id="reset" type="button">Reset zoom</button>
  <span id="matched"></span>
</header>
<div id="details"></div>
<div id="graph" role="tree"></div>
<div id="tooltip"></div>
<script id="profile-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var ROW = 17;
  var root = JSON.parse(document.getElementById("profile-data").textContent);
  var graph = document.getElementById("graph");
  var tooltip = document.getElementById("tooltip");
  var details = document.getElementById("details");
  var matched = document.getElementById("matched");
  var search = document.getElementById("search");
  var total = root[1] || 1;
  var zoomed = null;   // the node shown full width
  var pattern = null;

  // Parent links and depth, once.
  (function index(node, parent, depth) {
    node.parent = parent; node.depth = depth;
    for (var i = 0; i < node[3].length; i++) index(node[3][i], node, depth + 1);
  })(root, null, 0);

  function color(node) {
    var name = node[0], h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    if (node[2] === 2) return "hsl(210,40%," + (72 + h % 12) + "%)";
    if (node[2] === 1) return "hsl(" + (10 + h % 25) + ",75%," + (62 + h % 10) + "%)";
    return "hsl(" + (30 + h % 30) + ",85%," + (55 + h % 12) + "%)";
  }
  function pct(v) { return (100 * v / total).toFixed(2) + "%"; }
  function label(node) { return node[0] + " (" + node[1] + " samples, " + pct(node[1]) + ")"; }

  function render() {
    var focus = zoomed || root;
    var width = graph.clientWidth || 1200;
    var frames = [];
    var maxDepth = 0;
    // Ancestors of the zoomed node stay visible, full width, above it.
    var chain = [];
    for (var a = focus; a; a = a.parent) chain.unshift(a);
    chain.forEach(function (n) { frames.push([n, 0, width]); });
    (function lay(node, x, w) {
      var cx = x;
      for (var i = 0; i < node[3].length; i++) {
        var c = node[3][i];
        var cw = w * c[1] / node[1];
        if (cw >= 0.5) { frames.push([c, cx, cw]); lay(c, cx, cw); }
        cx += cw;
      }
    })(focus, 0, width);
    frames.forEach(function (f) { if (f[0].depth > maxDepth) maxDepth = f[0].depth; });
    graph.textContent = "";
    graph.style.height = ((maxDepth + 1) * ROW) + "px";
    var frag = document.createDocumentFragment();
    frames.forEach(function (f) {
      var node = f[0], el = document.createElement("div");
      el.className = "frame";
      el.style.left = f[1] + "px";
      el.style.width = f[2] + "px";
      // Icicle upside down: root at the bottom, as flame graphs are drawn.
      el.style.top = ((maxDepth - node.depth) * ROW) + "px";
      el.style.background = color(node);
      el.textContent = f[2] > 20 ? node[0] : "";
      el.setAttribute("aria-label", label(node));   // what the hover tooltip shows, for screen readers too
      el.setAttribute("data-name", node[0]);
      el.setAttribute("data-samples", node[1]);
      el.setAttribute("role", "treeitem");
      el.node = node;
      if (pattern && pattern.test(node[0])) el.classList.add("match");
      frag.appendChild(el);
    });
    graph.appendChild(frag);
    graph.setAttribute("data-zoom", focus[0]);
    details.textContent = zoomed ? "Zoomed into " + label(zoomed) : "";
  }

  function updateMatches() {
    if (!pattern) { matched.textContent = ""; return; }
    // Count each matching subtree once (a match below a match is already inside it).
    var sum = 0;
    (function walk(node) {
      if (node !== root && pattern.test(node[0])) { sum += node[1]; return; }
      for (var i = 0; i < node[3].length; i++) walk(node[3][i]);
    })(root);
    matched.textContent = "Matched: " + pct(sum);
  }

  graph.addEventListener("click", function (ev) {
    var el = ev.target.closest(".frame");
    if (!el) return;
    zoomed = (el.node === root || el.node === zoomed) ? (el.node === zoomed && el.node.parent ? el.node.parent : null)
                                                       : el.node;
    if (zoomed === root) zoomed = null;
    render();
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
    var text = search.value;
    try { pattern = text ? new RegExp(text) : null; } catch (e) { pattern = null; }
    updateMatches();
    render();
  });
  document.getElementById("reset").addEventListener("click", function () { zoomed = null; render(); });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { zoomed = null; render(); } });
  window.addEventListener("resize", render);
  window.hotstackFlamegraph = {
    zoom: function (name) {   // zoom into the widest frame with this name
      var best = null;
      (function walk(n) { if (n[0] === name && (!best || n[1] > best[1])) best = n; n[3].forEach(walk); })(root);
      zoomed = best === root ? null : best; render(); return !!best;
    },
    search: function (text) { search.value = text; search.dispatchEvent(new Event("input")); return matched.textContent; }
  };
  render();
  // Links into the graph: #zoom=NAME clicks the widest frame of that name, #search=TEXT searches.
  (location.hash || "").replace(/^#/, "").split("&").forEach(function (part) {
    var eq = part.indexOf("="), key = part.slice(0, eq), value = decodeURIComponent(part.slice(eq + 1));
    if (key === "search") window.hotstackFlamegraph.search(value);
    if (key === "zoom") {
      var best = null;
      graph.querySelectorAll(".frame").forEach(function (el) {
        if (el.node[0] === value && (!best || el.node[1] > best.node[1])) best = el;
      });
      if (best) best.dispatchEvent(new MouseEvent("click", {bubbles: true}));
    }
  });
})();
</script>
</body>
</html>
"""
