"""The viewer's plots, drawn as inline SVG text (no script, no network): a histogram, a heat map, a
line plot and a horizontal bar chart. Every number and label is escaped; sizes are in pixels."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

WIDTH = 560
HEIGHT = 220
PAD = 40
FONT = 'font-family="sans-serif" font-size="11"'


def _num(x: float) -> str:
    return f"{x:.4g}"


def _open(width: int, height: int, label: str, cls: str) -> str:
    return (f'<svg class="{cls}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(label)}">')  # fmt: skip


def histogram(edges: Sequence[float], counts: Sequence[int], *, label: str = "histogram") -> str:
    """Bars over [edges[0], edges[-1]], one per count; a tooltip (<title>) per bar."""
    w, h = WIDTH, HEIGHT
    out = [_open(w, h, label, "histogram")]
    top = max(counts) if counts else 0
    n = len(counts)
    plot_w, plot_h = w - 2 * PAD, h - 2 * PAD
    out.append(f'<line x1="{PAD}" y1="{h - PAD}" x2="{w - PAD}" y2="{h - PAD}" stroke="#444"/>')
    for i, c in enumerate(counts):
        bh = 0.0 if not top else plot_h * c / top
        x = PAD + plot_w * i / max(1, n)
        bw = max(1.0, plot_w / max(1, n) - 1)
        tip = html.escape(f"[{_num(edges[i])}, {_num(edges[i + 1])}): {c:,}")
        out.append(f'<rect class="bar" x="{x:.1f}" y="{h - PAD - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                   f'fill="#4a78c2"><title>{tip}</title></rect>')  # fmt: skip
    if edges:
        out.append(f'<text x="{PAD}" y="{h - PAD + 16}" {FONT}>{html.escape(_num(edges[0]))}</text>')
        out.append(
            f'<text x="{w - PAD}" y="{h - PAD + 16}" text-anchor="end" {FONT}>{html.escape(_num(edges[-1]))}</text>'
        )
    out.append(f'<text x="{PAD}" y="{PAD - 8}" {FONT}>max count {top:,}</text></svg>')
    return "".join(out)


def _color(t: float) -> str:
    """Blue (0) through white (0.5) to red (1)."""
    t = min(1.0, max(0.0, t))
    if t < 0.5:
        k = t / 0.5
        r, g, b = int(59 + (255 - 59) * k), int(76 + (255 - 76) * k), int(192 + (255 - 192) * k)
    else:
        k = (t - 0.5) / 0.5
        r, g, b = int(255 - (255 - 180) * k), int(255 - (255 - 4) * k), int(255 - (255 - 38) * k)
    return f"#{r:02x}{g:02x}{b:02x}"


def heat_map(values: Sequence[Sequence[float | None]], *, label: str = "heat map", cell: int = 0) -> str:
    """One rectangle per value, colored from the lowest (blue) to the highest (red); missing (NaN,
    Inf) values grey."""
    rows = len(values)
    cols = max((len(r) for r in values), default=0)
    if not rows or not cols:
        return ""
    cell = cell or max(3, min(16, 512 // max(rows, cols)))
    finite = [v for r in values for v in r if v is not None]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    span = high - low or 1.0
    w, h = cols * cell + 2, rows * cell + 20
    out = [_open(w, h, label, "heatmap")]
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            fill = "#999999" if v is None else _color((v - low) / span)
            tip = "NaN/Inf" if v is None else _num(v)
            out.append(f'<rect x="{1 + j * cell}" y="{1 + i * cell}" width="{cell}" height="{cell}" fill="{fill}">'
                       f"<title>[{i}, {j}] {tip}</title></rect>")  # fmt: skip
    out.append(f'<text x="1" y="{h - 4}" {FONT}>{html.escape(f"from {_num(low)} (blue) to {_num(high)} (red)")}</text>')
    out.append("</svg>")
    return "".join(out)


def line_plot(series: dict[str, Sequence[float | None]], *, label: str = "line plot") -> str:
    """One polyline per series over its index (each series scaled to its own range, listed in the
    legend with that range); gaps at missing values."""
    w, h = WIDTH, HEIGHT
    colors = ("#4a78c2", "#c2504a", "#4aa05a", "#9a4ac2", "#c29a4a", "#4ab3c2")
    out = [_open(w, h, label, "lineplot")]
    out.append(f'<line x1="{PAD}" y1="{h - PAD}" x2="{w - PAD}" y2="{h - PAD}" stroke="#444"/>')
    for k, (name, ys) in enumerate(list(series.items())[: len(colors)]):
        finite = [y for y in ys if y is not None and math.isfinite(y)]
        if not finite:
            continue
        low, high = min(finite), max(finite)
        span = high - low or 1.0
        n = max(1, len(ys) - 1)
        parts: list[list[str]] = [[]]
        for i, y in enumerate(ys):
            if y is None:
                parts.append([])
                continue
            x = PAD + (w - 2 * PAD) * i / n
            yy = h - PAD - (h - 2 * PAD) * (y - low) / span
            parts[-1].append(f"{x:.1f},{yy:.1f}")
        for pts in parts:
            if pts:
                out.append(f'<polyline class="series" fill="none" stroke="{colors[k]}" stroke-width="1.5" '
                           f'points="{" ".join(pts)}"/>')  # fmt: skip
        legend = html.escape(f"{name}: {_num(low)} .. {_num(high)}")
        out.append(f'<text x="{PAD + 4}" y="{PAD - 20 + 13 * k}" fill="{colors[k]}" {FONT}>{legend}</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(items: Sequence[tuple[str, float]], *, label: str = "bar chart", unit: str = "") -> str:
    """Horizontal bars, one row per (name, value), scaled to the largest value; names escaped."""
    row = 16
    w = WIDTH + 200
    h = row * len(items) + 24
    top = max((v for _, v in items if math.isfinite(v)), default=0.0) or 1.0
    out = [_open(w, h, label, "barchart")]
    for i, (name, v) in enumerate(items):
        y = 4 + i * row
        bw = 0.0 if not math.isfinite(v) else (WIDTH - 260) * max(0.0, v) / top
        text = html.escape(name if len(name) <= 48 else "..." + name[-45:])
        out.append(f'<text x="250" y="{y + 11}" text-anchor="end" {FONT}>{text}</text>')
        out.append(f'<rect class="bar" x="256" y="{y}" width="{bw:.1f}" height="{row - 3}" fill="#c2504a">'
                   f"<title>{html.escape(name)}: {html.escape(_num(v))}{html.escape(unit)}</title></rect>")  # fmt: skip
        out.append(f'<text x="{260 + bw:.1f}" y="{y + 11}" {FONT}>{html.escape(_num(v))}</text>')
    out.append("</svg>")
    return "".join(out)


__all__ = ["bar_chart", "heat_map", "histogram", "line_plot"]
