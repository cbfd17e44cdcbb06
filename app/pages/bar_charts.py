"""Bar charts as plain data for a template to draw as SVG, no script: columns along a category
axis, stacked by series, and horizontal bars with a label each; both with a value axis whose
ticks are round numbers. Every number is in SVG user units."""

from __future__ import annotations

import math

WIDTH = 760
LEFT = 56  # room for the value axis's labels
RIGHT = 12
TOP = 12
PLOT_HEIGHT = 220
BOTTOM = 40  # room for the category labels
CATEGORY_LABEL_SPACE = 64  # a label every this many units at most
BAR_LABEL_WIDTH = 230  # horizontal bars: room for their labels
BAR_VALUE_SPACE = 70  # and for the value after each bar
BAR_ROW = 24
BAR_THICKNESS = 16
MAX_LABEL = 34


def _short(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scale(largest: int, parts: int = 4) -> tuple[int, list[int]]:
    """A round step (1, 2 or 5 times a power of ten) that splits `largest` in about `parts`, the
    axis's top (a multiple of it) and the ticks from 0 to the top."""
    rough = max(largest / parts, 1)
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    top = max(step, math.ceil(largest / step) * step)
    return top, list(range(0, top + 1, step))


def column_chart(categories: list[str], series: list[str], values: dict[tuple[str, str], int], *,
                 unit: str, labels: dict[str, str] | None = None) -> dict:
    """One column per category, stacked by series (in the order given, the first at the bottom);
    `labels` shortens a category's name on the axis (its title keeps it whole)."""
    plot_width = WIDTH - LEFT - RIGHT
    bottom = TOP + PLOT_HEIGHT
    totals = [sum(values.get((c, s), 0) for s in series) for c in categories]
    top, ticks = _scale(max(totals, default=0))
    slot = plot_width / max(len(categories), 1)
    bar = max(2.0, min(slot * 0.72, 64))
    label_every = max(1, math.ceil(CATEGORY_LABEL_SPACE / slot))
    columns = []
    for i, (category, total) in enumerate(zip(categories, totals, strict=True)):
        x = LEFT + i * slot + (slot - bar) / 2
        y = float(bottom)
        segments = []
        for j, name in enumerate(series):
            value = values.get((category, name), 0)
            if value:
                height = value / top * PLOT_HEIGHT
                y -= height
                segments.append({"series": j, "name": name, "value": value, "y": round(y, 1),
                                 "height": round(height, 1)})
        columns.append({"label": (labels or {}).get(category, category), "title": category, "total": total,
                        "x": round(x, 1), "width": round(bar, 1), "center": round(x + bar / 2, 1),
                        "segments": segments, "show_label": i % label_every == 0})
    return {"width": WIDTH, "height": bottom + BOTTOM, "unit": unit,
            "plot": {"left": LEFT, "right": WIDTH - RIGHT, "top": TOP, "bottom": bottom},
            "ticks": [{"y": round(bottom - t / top * PLOT_HEIGHT, 1), "label": f"{t:,}"} for t in ticks],
            "columns": columns, "legend": [{"series": j, "name": name} for j, name in enumerate(series)]}


def bar_chart(rows: list[tuple[str, int, str]], *, unit: str) -> dict:
    """One horizontal bar per (label, value, note) row, top to bottom in the order given."""
    plot_left, plot_right = BAR_LABEL_WIDTH, WIDTH - BAR_VALUE_SPACE
    top, ticks = _scale(max((value for _, value, _ in rows), default=0))
    first = TOP + 16  # below the tick labels
    bars = [{"label": _short(label), "title": label, "value": value, "note": note,
             "y": first + i * BAR_ROW, "thickness": BAR_THICKNESS,
             "width": round(value / top * (plot_right - plot_left), 1), "text_y": first + i * BAR_ROW + 12}
            for i, (label, value, note) in enumerate(rows)]
    bottom = first + len(rows) * BAR_ROW
    return {"width": WIDTH, "height": bottom + 8, "unit": unit,
            "plot": {"left": plot_left, "right": plot_right, "top": first, "bottom": bottom},
            "ticks": [{"x": round(plot_left + t / top * (plot_right - plot_left), 1), "label": f"{t:,}"}
                      for t in ticks], "bars": bars}
