"""The inspector's stylesheet and script, served from ``/ui/static/`` (nothing from elsewhere)."""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root { --fg:#1b1f24; --muted:#57606a; --bg:#fff; --line:#d0d7de; --accent:#0b5cad; --soft:#f3f5f8;
  --c0:#0b5cad; --c1:#2e8540; --c2:#b35900; --c3:#7a3db8; --c4:#b3124e; --c5:#4d6b7a; }
@media (prefers-color-scheme: dark) { :root { --fg:#e6edf3; --muted:#9aa4ae; --bg:#0d1117; --line:#30363d;
  --accent:#6cb6ff; --soft:#161b22; } }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
a { color:var(--accent); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, summary:focus-visible {
  outline:3px solid var(--accent); outline-offset:2px; }
.skip { position:absolute; left:-999px; } .skip:focus { left:8px; top:8px; background:var(--bg); padding:4px; }
header { display:flex; flex-wrap:wrap; align-items:center; gap:12px; padding:8px 16px; border-bottom:1px solid var(--line); }
.brand { font-weight:700; text-decoration:none; }
nav ul { display:flex; flex-wrap:wrap; gap:12px; list-style:none; margin:0; padding:0; }
nav a[aria-current] { font-weight:700; text-decoration:none; }
.signout { margin-left:auto; display:flex; gap:8px; align-items:center; color:var(--muted); }
main { padding:12px 16px 48px; max-width:1100px; }
h1 { font-size:1.4rem; margin:.3em 0 .6em; } h2 { font-size:1.15rem; margin-top:1.6em; }
.scroll { overflow-x:auto; }
table { border-collapse:collapse; width:100%; }
caption { text-align:left; color:var(--muted); padding:4px 0; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
form.filters { display:flex; flex-wrap:wrap; gap:8px 14px; align-items:end; margin-bottom:12px; }
label { display:flex; flex-direction:column; font-size:.85rem; color:var(--muted); gap:2px; }
input, select, button { font:inherit; padding:5px 8px; border:1px solid var(--line); border-radius:6px;
  background:var(--bg); color:var(--fg); }
button { cursor:pointer; background:var(--soft); }
button.danger { border-color:#b3124e; color:#b3124e; }
.pager { display:flex; gap:12px; align-items:center; margin:10px 0; }
.msg { border:1px solid var(--line); border-radius:8px; padding:8px 10px; margin:8px 0; }
.msg .meta { color:var(--muted); font-size:.85rem; }
.msg.user { border-left:4px solid var(--c0); } .msg.assistant { border-left:4px solid var(--c1); }
.msg.tool { border-left:4px solid var(--c2); } .msg.system { border-left:4px solid var(--c5); }
.text { white-space:pre-wrap; overflow-wrap:anywhere; margin:4px 0 0; font:inherit; }
pre.card, pre.json { white-space:pre-wrap; overflow-wrap:anywhere; background:var(--soft); padding:10px; border-radius:8px; font-size:.85rem; }
dl.facts { display:grid; grid-template-columns:max-content 1fr; gap:2px 12px; }
dl.facts dt { color:var(--muted); }
.tabs { display:flex; flex-wrap:wrap; gap:14px; margin:6px 0 12px; }
.tabs a[aria-current] { font-weight:700; text-decoration:none; }
.flash { background:var(--soft); border-left:4px solid var(--c1); padding:8px 12px; }
.error { background:var(--soft); border-left:4px solid var(--c4); padding:8px 12px; }
.empty { color:var(--muted); }
svg .seg0, .key.seg0 { fill:var(--c0); background:var(--c0); } svg .seg1, .key.seg1 { fill:var(--c1); background:var(--c1); }
svg .seg2, .key.seg2 { fill:var(--c2); background:var(--c2); } svg .seg3, .key.seg3 { fill:var(--c3); background:var(--c3); }
svg .seg4, .key.seg4 { fill:var(--c4); background:var(--c4); } svg .seg5, .key.seg5 { fill:var(--c5); background:var(--c5); }
svg .unused { fill:var(--soft); stroke:var(--line); }
svg .input, .key.input { fill:var(--c0); background:var(--c0); } svg .cached, .key.cached { fill:var(--c5); background:var(--c5); }
svg .output, .key.output { fill:var(--c1); background:var(--c1); } svg .cost, .key.cost { fill:var(--c4); background:var(--c4); }
svg .axis { stroke:var(--muted); } svg text { fill:var(--muted); font-size:11px; } svg .mark { fill:var(--c2); font-weight:700; }
.key { display:inline-block; width:.8em; height:.8em; border-radius:2px; margin:0 4px 0 8px; vertical-align:middle; }
ul.legend { list-style:none; padding:0; display:flex; flex-wrap:wrap; gap:4px 12px; }
ol.timeline { list-style:none; padding:0; border-left:2px solid var(--line); }
ol.timeline li { padding:3px 10px; } ol.timeline li[aria-current] { background:var(--soft); font-weight:600; }
.chart svg { width:100%; height:auto; max-height:260px; }
meter { width:160px; }
@media (max-width: 640px) { th, td { padding:4px; } .signout { margin-left:0; } }
"""

JS = """
// The inspector works without this script; it only makes filter menus apply when they change.
document.addEventListener("change", function (event) {
  var field = event.target;
  if (field.matches && field.matches("select[data-autosubmit]") && field.form) { field.form.requestSubmit(); }
});
"""
