"""The layout of a retry timeline drawing, as plain data for the template to draw as SVG: one lane
for the producer and broker, one per consumer group, and the hops as points from left to right
in time order (evenly spaced: hops milliseconds apart stay readable next to hops hours apart).
One line per lane joins its hops, with the time between them on the line: a group's line starts
at the broker's hop it forked from, so no line runs from one group's hops to another's."""

from __future__ import annotations

import datetime as dt

from app.services.timeline_hops import Hop
from store.format import topics

BROKER_LANE = "producer / broker"
LABEL_WIDTH = 170  # lane names
STEP = 140  # between hops
LANE_HEIGHT = 84
TOP = 28  # above the first lane
BOTTOM = 12
RADIUS = 7
MAX_LANE_LABEL = 22


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clock(epoch_ms: int) -> tuple[str, str]:
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):  # outside years 1-9999: a producer with a bad clock
        return "?", f"{epoch_ms} ms"
    return moment.strftime("%Y-%m-%d"), moment.strftime("%H:%M:%S.") + f"{epoch_ms % 1000:03d}"


def timeline_layout(hops: list[Hop], groups: list[str]) -> dict:
    """Sizes, lanes, points and the path between them; every number in SVG user units."""
    lane_names = [None, *groups, *sorted({h.group for h in hops if h.group and h.group not in groups})]
    lane_y = {name: TOP + LANE_HEIGHT // 2 + i * LANE_HEIGHT for i, name in enumerate(lane_names)}
    width = LABEL_WIDTH + max(len(hops), 1) * STEP + 16
    height = TOP + len(lane_names) * LANE_HEIGHT + BOTTOM
    lanes = [{"name": name or BROKER_LANE, "label": _short(name or BROKER_LANE, MAX_LANE_LABEL), "y": lane_y[name],
              "top": lane_y[name] - LANE_HEIGHT // 2, "group": name} for name in lane_names]
    points, shown_date = [], None
    for i, hop in enumerate(hops):
        date, clock = _clock(hop.time_ms)
        points.append({"x": LABEL_WIDTH + STEP // 2 + i * STEP, "y": lane_y[hop.group], "kind": hop.kind,
                       "line": _line_of(hop, lane_names),
                       "label": hop.label + (f" #{hop.attempt}" if hop.attempt else ""), "clock": clock,
                       "date": date if date != shown_date else None, "time_ms": hop.time_ms, "group": hop.group,
                       "detail": hop.detail, "derived": hop.derived, "offset_msg_id": hop.offset_msg_id})
        shown_date = date
    lines = [_line(points, lane["group"]) for lane in lanes]
    lines = [line for line in lines if len(line["points"]) > 1]
    return {"width": width, "height": height, "label_width": LABEL_WIDTH, "radius": RADIUS, "lane_height": LANE_HEIGHT,
            "lanes": lanes, "points": points, "lines": lines}


def _line_of(hop: Hop, groups: list[str | None]) -> str | None:
    """The group whose line goes through a hop: its own, or for a dead letter resent to a
    group's retry topic (drawn on the broker's lane) that group."""
    if hop.group is not None or hop.kind != "resent" or not hop.topic:
        return hop.group
    owners = [g for g in groups if g is not None and (hop.topic == topics.retry_topic(g)
                                                     or hop.topic.startswith(topics.retry_topic(g) + "_"))]
    return max(owners, key=len) if owners else None  # the longest name: GID_a_b over GID_a


def _line(points: list[dict], group: str | None) -> dict:
    """The line of one lane through its points. A group's starts at the broker's last point
    before the group's first (where the message forked to it) and runs along the broker's lane
    until just before the group's first point, so it crosses no other group's point."""
    own = [p for p in points if p["line"] == group]
    corners = [(p["x"], p["y"]) for p in own]
    fork = [p for p in points if p["line"] is None and own and p["x"] < own[0]["x"]] if group is not None else []
    gaps = [{"x": (a["x"] + b["x"]) // 2, "y": (a["y"] + b["y"]) // 2 + 13,  # below the line, between two times
             "ms": b["time_ms"] - a["time_ms"]} for a, b in zip(own, own[1:], strict=False)]
    if fork:
        start, first = fork[-1], own[0]
        bend = (first["x"] - STEP // 4, start["y"])
        corners = [(start["x"], start["y"]), bend, *corners]
        gaps.insert(0, {"x": bend[0] + (first["x"] - bend[0]) // 3 + 22,  # beside the drop, above other lines' gaps
                        "y": bend[1] + (first["y"] - bend[1]) // 3 + 4, "ms": first["time_ms"] - start["time_ms"]})
        own = [start, *own]
    return {"group": group or "", "points": own, "path": " ".join(f"{x},{y}" for x, y in corners), "gaps": gaps}
