"""The dlq-report's charts, shaped from its tables: dead letters per day stacked by group, retries
per group, time to the dead-letter queue stacked by group, and the keys with the most dead
letters. Each has a title and a sentence saying what it shows, for people who cannot see it."""

from __future__ import annotations

import datetime as dt

from app.pages.bar_charts import bar_chart, column_chart
from app.services.pipeline_results import ResultTable

GROUPS_STACKED = 6  # groups beyond these are summed as one series
OTHER_GROUPS = "other groups"
DAYS_SHOWN = 60
GROUPS_BARRED = 15
KEYS_SHOWN = 10


def _complete(table: ResultTable, *fields: str) -> list[dict]:
    """The rows that have every one of `fields` (a null in them would leave a bar without a name)."""
    return [row for row in table.rows if all(row.get(name) is not None for name in fields)]


def _series(totals: dict[str, int]) -> list[str]:
    ranked = sorted(totals, key=lambda group: (-totals[group], group))
    return ranked[:GROUPS_STACKED] + ([OTHER_GROUPS] if len(ranked) > GROUPS_STACKED else [])


def _stacked(rows: list[dict], category_of, series: list[str]) -> dict[tuple[str, str], int]:
    values: dict[tuple[str, str], int] = {}
    for row in rows:
        name = row["group"] if row["group"] in series else OTHER_GROUPS
        key = (category_of(row), name)
        values[key] = values.get(key, 0) + (row["dead_letters"] or 0)
    return values


def _group_totals(rows: list[dict]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["group"]] = totals.get(row["group"], 0) + (row["dead_letters"] or 0)
    return totals


def daily_chart(daily: ResultTable) -> dict | None:
    rows = [r for r in _complete(daily, "day", "group") if isinstance(r["day"], dt.date)]
    if not rows:
        return None
    last = max(r["day"] for r in rows)
    first = max(min(r["day"] for r in rows), last - dt.timedelta(days=DAYS_SHOWN - 1))
    rows = [r for r in rows if r["day"] >= first]
    days = [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]
    categories = [d.isoformat() for d in days]
    totals = _group_totals(rows)
    series = _series(totals)
    values = _stacked(rows, lambda r: r["day"].isoformat(), series)
    layout = column_chart(categories, series, values, unit="dead letters",
                          labels={d.isoformat(): d.strftime("%m-%d") for d in days})
    per_day = {day: sum(v for (d, _), v in values.items() if d == day) for day in categories}
    busiest = max(per_day, key=lambda day: (per_day[day], day))
    words = (f"{sum(totals.values()):,} dead letters from {first.isoformat()} to {last.isoformat()} in "
             f"{len(totals)} group{'s' if len(totals) != 1 else ''}; the most on {busiest} ({per_day[busiest]:,}).")
    return {"id": "daily", "title": "Dead letters per day, by group", "description": words, "kind": "columns",
            "layout": layout}


def retries_chart(retries: ResultTable) -> dict | None:
    rows = _complete(retries, "group")[:GROUPS_BARRED]
    if not rows:
        return None
    bars = [(r["group"], r["retry_records"] or 0,
             f"{r['retried_messages'] or 0:,} messages retried, {r['dead_letters'] or 0:,} dead")
            for r in rows]
    top = rows[0]
    words = (f"Retries per group for {len(retries.rows)} group{'s' if len(retries.rows) != 1 else ''}; the most: "
             f"{top['group']}, {top['retry_records'] or 0:,} retries of {top['retried_messages'] or 0:,} messages.")
    return {"id": "retries", "title": "Retries per group", "description": words, "kind": "bars",
            "layout": bar_chart(bars, unit="retries")}


def time_to_dlq_chart(histogram: ResultTable) -> dict | None:
    rows = _complete(histogram, "group", "bucket", "bucket_order")
    if not rows:
        return None
    buckets = {r["bucket_order"]: r["bucket"] for r in sorted(rows, key=lambda r: r["bucket_order"])}
    categories = list(buckets.values())
    totals = _group_totals(rows)
    series = _series(totals)
    values = _stacked(rows, lambda r: buckets[r["bucket_order"]], series)
    per_bucket = {b: sum(v for (c, _), v in values.items() if c == b) for b in categories}
    busiest = max(categories, key=lambda b: per_bucket[b])
    words = (f"How long {sum(totals.values()):,} dead letters took from their first store to the dead-letter "
             f"queue; most took {busiest} ({per_bucket[busiest]:,}).")
    return {"id": "time-to-dlq", "title": "Time to the dead-letter queue, by group", "description": words,
            "kind": "columns", "layout": column_chart(categories, series, values, unit="dead letters")}


def top_keys_chart(top_keys: ResultTable) -> dict | None:
    rows = sorted(_complete(top_keys, "group", "value"),
                  key=lambda r: (-(r["dead_letters"] or 0), r["group"], r["value"]))[:KEYS_SHOWN]
    if not rows:
        return None
    bars = [(f"{r['value']} ({r['group']})", r["dead_letters"] or 0, "") for r in rows]
    top = rows[0]
    words = (f"The {len(rows)} keys with the most dead letters; first {top['value']} of group {top['group']} "
             f"with {top['dead_letters'] or 0:,}.")
    return {"id": "top-keys", "title": "Top failing keys", "description": words, "kind": "bars",
            "layout": bar_chart(bars, unit="dead letters")}


def dlq_charts(tables: dict[str, ResultTable]) -> list[dict]:
    made = [daily_chart(tables["daily"]) if "daily" in tables else None,
            retries_chart(tables["retries"]) if "retries" in tables else None,
            time_to_dlq_chart(tables["ttd_histogram"]) if "ttd_histogram" in tables else None,
            top_keys_chart(tables["top_keys"]) if "top_keys" in tables else None]
    return [chart for chart in made if chart is not None]
