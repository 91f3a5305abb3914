"""The agent's flame graph page from the local store's folded stacks (no external scripts: works offline)."""

from __future__ import annotations

import html
import json
from collections import Counter

from ..profile.flamegraph import as_dict, build_tree, folded_paths


def tree(folded: Counter) -> dict:
    """Folded stacks ("root;child;leaf" -> value) as a nested {n, v, c} tree (the one flame tree)."""
    return as_dict(build_tree(folded_paths(folded)))


_SCRIPT = """
const data = JSON.parse(document.getElementById('data').textContent);
const box = document.getElementById('flame'), H = 18;
function color(name){let h=0;for(const c of name)h=(h*31+c.charCodeAt(0))>>>0;return `hsl(${20+h%40},85%,${55+h%15}%)`;}
function draw(root){
  box.innerHTML=''; let depth=0;
  const W = box.clientWidth;
  function walk(node, x, w, d){
    if (w < 0.5) return; depth=Math.max(depth,d);
    const el=document.createElement('div'); el.className='f';
    el.style.left=x+'px'; el.style.width=(w-1)+'px'; el.style.top=(d*H)+'px'; el.style.background=color(node.n);
    el.title=`${node.n}\\n${node.v} samples (${(100*node.v/root.v).toFixed(2)}%)`;
    el.textContent=w>30?node.n:''; el.onclick=()=>draw(node); box.appendChild(el);
    let cx=x; for(const c of node.c){const cw=w*c.v/node.v; walk(c,cx,cw,d+1); cx+=cw;}
  }
  walk(root,0,W,0); box.style.height=((depth+1)*H)+'px';
}
draw(data); window.onresize=()=>draw(data);
"""


def page(title: str, folded: Counter, services: list[str], current: str, minutes: float) -> str:
    options = "".join(f'<option value="{html.escape(s)}"{" selected" if s == current else ""}>{html.escape(s)}'
                      f"</option>" for s in [""] + services)
    data = json.dumps(tree(folded)).replace("</", "<\\/")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:13px sans-serif;margin:16px}} #flame{{position:relative;width:100%}}
.f{{position:absolute;height:17px;overflow:hidden;white-space:nowrap;font:11px monospace;line-height:17px;
padding-left:2px;box-sizing:border-box;cursor:pointer;border-radius:2px}}</style></head><body>
<h1>{html.escape(title)}</h1>
<form>service_name <select name="service_name">{options}</select>
last <input name="minutes" size="4" value="{minutes:g}"> minutes <button>show</button>
<a href="/">components</a></form>
<p>{sum(folded.values())} samples, {len(folded)} distinct stacks. Click a frame to zoom, the root to reset.</p>
<div id="flame"></div><script id="data" type="application/json">{data}</script><script>{_SCRIPT}</script>
</body></html>"""
