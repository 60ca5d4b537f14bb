"""Charts drawn on the server as inline SVG (no script, no style attribute: sizes are SVG attributes,
colours come from the stylesheet's classes). Each has a text equivalent for screen readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remem.server._ui._html import Html, h, join

__all__ = ["budget_bar", "turn_chart"]


def budget_bar(sections: Sequence[Any], budget: int) -> Html:
    """One bar the width of the card's token budget, a segment per section, the rest unused."""
    total = max(budget, sum(s.tokens for s in sections), 1)
    x = 0.0
    rects = []
    legend = []
    for i, section in enumerate(sections):
        width = 100.0 * section.tokens / total
        rects.append(
            h(
                '<rect class="seg seg{}" x="{}%" y="0" width="{}%" height="24"><title>{}: {} tokens</title></rect>',
                i % 6,
                f"{x:.3f}",
                f"{width:.3f}",
                section.name,
                section.tokens,
            )
        )
        legend.append(
            h('<li><span class="key seg{}"></span>{}: {} tokens</li>', i % 6, section.name, section.tokens)
        )
        x += width
    used = sum(s.tokens for s in sections)
    label = f"{used} of {budget} tokens used by the card"
    return h(
        '<figure class="budget"><svg class="bar" role="img" aria-label="{}" width="100%" height="24" '
        'preserveAspectRatio="none"><rect class="unused" x="0" y="0" width="100%" height="24"></rect>{}</svg>'
        '<figcaption>{}</figcaption><ul class="legend">{}</ul></figure>',
        label,
        join(rects),
        label,
        join(legend),
    )


def turn_chart(turns: Sequence[dict[str, Any]]) -> Html:
    """Stacked bars of tokens per turn (cached input, other input, output), a dot per turn's cost, and a
    mark over the turns that wrote a summary revision (S) or compacted the conversation (C)."""
    if not turns:
        return h('<p class="empty">{}</p>', "No model calls recorded for this thread.")
    width, height, pad = 640, 220, 36
    tallest = max((t["input"] + t["output"]) for t in turns) or 1
    costliest = max((t["cost"] or 0.0) for t in turns) or 1.0
    step = (width - 2 * pad) / len(turns)
    bar = max(step * 0.7, 1.0)
    scale = (height - 2 * pad) / tallest
    parts = []
    for i, t in enumerate(turns):
        x = pad + i * step
        base = height - pad
        cached = min(t["cached"], t["input"])
        for cls, amount in (("cached", cached), ("input", t["input"] - cached), ("output", t["output"])):
            tall = amount * scale
            if tall <= 0:
                continue
            base -= tall
            parts.append(
                h(
                    '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>turn {}: {} {} tokens</title></rect>',
                    cls,
                    f"{x:.1f}",
                    f"{base:.1f}",
                    f"{bar:.1f}",
                    f"{tall:.1f}",
                    t["turn"],
                    amount,
                    cls,
                )
            )
        if t["cost"] is not None:
            cy = height - pad - (t["cost"] / costliest) * (height - 2 * pad)
            parts.append(
                h(
                    '<circle class="cost" cx="{}" cy="{}" r="3"><title>turn {}: cost {}</title></circle>',
                    f"{x + bar / 2:.1f}",
                    f"{cy:.1f}",
                    t["turn"],
                    f"{t['cost']:.5f}",
                )
            )
        marks = [
            (letter, about)
            for letter, about, on in (
                ("S", "the memory wrote a summary revision", t["summary"]),
                ("C", "a compaction (the graph's own summariser call)", t.get("compaction")),
            )
            if on
        ]
        for n, (letter, about) in enumerate(marks):
            parts.append(
                h(
                    '<text class="mark" x="{}" y="{}" text-anchor="middle">{}<title>turn {}: {}</title></text>',
                    f"{x + bar / 2:.1f}",
                    pad - 6 - 12 * n,
                    letter,
                    t["turn"],
                    about,
                )
            )
    axis = h(
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"></line>'
        '<text class="label" x="{}" y="{}">{} tokens</text><text class="label" x="{}" y="{}">turns 1–{}</text>',
        pad,
        height - pad,
        width - pad,
        height - pad,
        2,
        pad - 20,
        tallest,
        pad,
        height - 10,
        len(turns),
    )
    rows = join(
        h(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            t["turn"],
            t["input"],
            t["cached"],
            t["output"],
            "–" if t["cost"] is None else f"{t['cost']:.5f}",
            ", ".join(
                name for name, on in (("summary", t["summary"]), ("compaction", t.get("compaction"))) if on
            ),
        )
        for t in turns
    )
    return h(
        '<figure class="chart"><svg id="turn-chart" role="img" aria-labelledby="chart-title" viewBox="0 0 {} {}">'
        '<title id="chart-title">Tokens per turn ({} turns): input, cached input and output; dots: cost; S: a summary revision; C: a compaction</title>'
        "{}{}</svg>"
        '<figcaption><span class="key cached"></span>cached input <span class="key input"></span>input '
        '<span class="key output"></span>output <span class="key cost"></span>cost (right scale, max {})'
        "</figcaption>"
        '<details><summary>The numbers</summary><div class="scroll"><table><caption>Tokens and cost per turn</caption>'
        '<thead><tr><th scope="col">turn</th><th scope="col">input</th><th scope="col">cached</th>'
        '<th scope="col">output</th><th scope="col">cost</th><th scope="col">summariser</th></tr></thead>'
        "<tbody>{}</tbody></table></div></details></figure>",
        width,
        height,
        len(turns),
        axis,
        join(parts),
        f"{costliest:.5f}",
        rows,
    )
