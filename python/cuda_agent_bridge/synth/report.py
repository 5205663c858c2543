"""The funnel report of `synth export` as one self-contained HTML file with SVG charts
(DIR/funnel.html): the tasks left after each filter stage, the op-count mix of the kept tasks
against the paper's, the most used operators, and the eager runtimes (log bins)."""

from __future__ import annotations

import html
from typing import Any

from .compose import MIX

Json = dict[str, Any]
W, BAR, GAP, LABEL = 640, 18, 6, 220


def _bars(title: str, rows: list[tuple[str, float, str]], color: str = "#3b6ea5",
          ref: list[float] | None = None) -> str:
    """A horizontal bar chart: (label, value, shown text) rows; ref: a reference value per row
    drawn as a tick (the paper's mix)."""
    top = max([v for _, v, _ in rows] + (ref or []) + [1e-9])
    h = len(rows) * (BAR + GAP) + 30
    out = [f'<h2>{html.escape(title)}</h2>',
           f'<svg width="{W}" height="{h}" role="img" aria-label="{html.escape(title)}">']
    for i, (label, v, text) in enumerate(rows):
        y = 10 + i * (BAR + GAP)
        w = (W - LABEL - 80) * v / top
        out.append(f'<text x="{LABEL - 6}" y="{y + 13}" text-anchor="end" font-size="12">'
                   f'{html.escape(label)}</text>')
        out.append(f'<rect x="{LABEL}" y="{y}" width="{w:.1f}" height="{BAR}" fill="{color}"/>')
        out.append(f'<text x="{LABEL + w + 4:.1f}" y="{y + 13}" font-size="12">'
                   f'{html.escape(text)}</text>')
        if ref is not None:
            x = LABEL + (W - LABEL - 80) * ref[i] / top
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + BAR + 2}" '
                       f'stroke="#c0392b" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out)


def render(f: Json) -> str:
    stages = [("composed", float(f["filtered"]), str(f["filtered"]))]
    stages += [(s["stage"], float(s["left"]), f'{s["left"]} (-{s["dropped"]})')
               for s in f["stages"]]
    kept = max(1, f["kept"])
    kinds = list(MIX)
    mix = [(k if k == "block" else f"{k} op{'s' if k != '1' else ''}",
            100 * f["mix"].get(k, 0) / kept, f'{100 * f["mix"].get(k, 0) / kept:.1f} %')
           for k in kinds]
    ops = [(name, float(n), str(n)) for name, n in f["ops"][:30]]
    rt = [r for r in f["runtime_ms"] if r > 0]
    bins: list[tuple[str, float, str]] = []
    if rt:
        edges = [0.5 * 2 ** k for k in range(0, 10)]  # 0.5 ms .. 256 ms
        for lo, hi in zip(edges, edges[1:], strict=False):
            n = sum(1 for r in rt if lo <= r < hi)
            bins.append((f"{lo:g}-{hi:g} ms", float(n), str(n)))
    reasons = "".join(
        f"<tr><td>{html.escape(s['stage'])}</td><td>{s['dropped']}</td><td>"
        + html.escape("; ".join(f"{w} ({n})" for w, n in s["top_reasons"])) + "</td></tr>"
        for s in f["stages"])
    runtime_kind = "measured on the GPU" if f["runtime_measured"] else "estimated (roofline)"
    redrawn: dict[str, int] = f.get("redrawn_at_compose") or {}
    body = [
        "<!doctype html><html><head><meta charset='utf-8'><title>cuda-agent synth: funnel"
        "</title><style>body{font-family:sans-serif;max-width:760px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;"
        "font-size:12px;text-align:left}</style></head><body>",
        "<h1>cuda-agent synth: funnel</h1>",
        f"<p>{f['filtered']} tasks filtered, {f['kept']} kept.</p>",
        (f"<p>Before them, compose drew {sum(redrawn.values())} operator sets again: "
         + html.escape(", ".join(f"{w} {n}" for w, n in sorted(redrawn.items()))) + ".</p>")
        if redrawn else "",
        _bars("Tasks left after each stage", stages),
        "<table><tr><th>stage</th><th>dropped</th><th>top reasons</th></tr>" + reasons
        + "</table>",
        _bars("Op-count mix of the kept tasks (red: the paper's mix)", mix, "#2e8b57",
              [100 * MIX[k] for k in kinds]),
        _bars("The 30 most used operators", ops, "#7a5195"),
        _bars(f"Eager runtime, {runtime_kind}", bins, "#ef5675") if bins else "",
        f"<p>Runtimes: {len(rt)} tasks"
        + (f", median {sorted(rt)[len(rt) // 2]:.2f} ms" if rt else "") + ".</p>",
        "</body></html>",
    ]
    return "\n".join(b for b in body if b)
