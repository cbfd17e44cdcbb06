"""The dlq-report's charts as data: round axis ticks, groups past the sixth summed as one series,
days without dead letters kept as empty columns, only the last 60 days, and rows with a null
where a bar needs its name left out."""

from __future__ import annotations

import datetime as dt

import pytest

from app.pages.bar_charts import bar_chart, column_chart
from app.pages.dlq_charts import DAYS_SHOWN, OTHER_GROUPS, daily_chart, dlq_charts, time_to_dlq_chart, top_keys_chart
from app.services.pipeline_results import ResultTable


def table(name: str, rows: list[dict]) -> ResultTable:
    return ResultTable(name, list(rows[0]) if rows else [], rows, len(rows))


@pytest.mark.parametrize(("largest", "ticks"), [
    (0, ["0", "1"]), (7, ["0", "2", "4", "6", "8"]), (1234, ["0", "500", "1,000", "1,500"]),
    (40, ["0", "10", "20", "30", "40"])])
def test_the_value_axis_has_round_ticks_from_zero_past_the_largest(largest, ticks):
    columns = column_chart(["a"], ["s"], {("a", "s"): largest}, unit="x")
    assert [t["label"] for t in columns["ticks"]] == ticks
    bars = bar_chart([("a", largest, "")], unit="x")
    assert [t["label"] for t in bars["ticks"]] == ticks


def test_a_stacked_column_is_as_tall_as_its_total():
    chart = column_chart(["a", "b"], ["s1", "s2"], {("a", "s1"): 30, ("a", "s2"): 10, ("b", "s2"): 40}, unit="x")
    a, b = chart["columns"]
    assert sum(s["height"] for s in a["segments"]) == pytest.approx(sum(s["height"] for s in b["segments"]))
    assert [s["name"] for s in a["segments"]] == ["s1", "s2"] and a["segments"][0]["y"] > a["segments"][1]["y"]
    assert (a["total"], b["total"]) == (40, 40)


def test_groups_past_the_sixth_are_one_series_and_empty_days_are_columns():
    day = dt.date(2026, 11, 1)
    rows = [{"day": day, "group": f"g{n}", "topic": "T", "dead_letters": 10 - n} for n in range(8)]
    rows.append({"day": day + dt.timedelta(days=3), "group": "g0", "topic": "T", "dead_letters": 5})
    rows.append({"day": None, "group": "g0", "topic": "T", "dead_letters": 99})
    chart = daily_chart(table("daily", rows))
    layout = chart["layout"]
    assert [s["name"] for s in layout["legend"]] == ["g0", "g1", "g2", "g3", "g4", "g5", OTHER_GROUPS]
    assert [c["title"] for c in layout["columns"]] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert [c["total"] for c in layout["columns"]] == [52, 0, 0, 5]
    other = layout["columns"][0]["segments"][-1]
    assert (other["name"], other["value"]) == (OTHER_GROUPS, 4 + 3)  # g6 and g7
    assert chart["description"] == ("57 dead letters from 2026-11-01 to 2026-11-04 in 8 groups; the most on "
                                    "2026-11-01 (52).")


def test_only_the_last_days_are_charted():
    first = dt.date(2026, 1, 1)
    rows = [{"day": first + dt.timedelta(days=n), "group": "g", "topic": "T", "dead_letters": 1} for n in range(100)]
    columns = daily_chart(table("daily", rows))["layout"]["columns"]
    assert len(columns) == DAYS_SHOWN and columns[-1]["title"] == (first + dt.timedelta(days=99)).isoformat()


def test_time_to_dlq_follows_the_bucket_order_and_top_keys_the_counts():
    histogram = table("ttd_histogram", [
        {"group": "g", "bucket": "> 1 h", "bucket_order": 6, "dead_letters": 1},
        {"group": "g", "bucket": "< 1 s", "bucket_order": 0, "dead_letters": 4},
        {"group": "h", "bucket": "< 1 s", "bucket_order": 0, "dead_letters": 2}])
    chart = time_to_dlq_chart(histogram)
    assert [c["label"] for c in chart["layout"]["columns"]] == ["< 1 s", "> 1 h"]
    assert chart["description"].endswith("most took < 1 s (6).")
    keys = top_keys_chart(table("top_keys", [
        {"group": "g", "value": "k1", "dead_letters": 2, "rank": 1},
        {"group": "h", "value": "k9", "dead_letters": 7, "rank": 1},
        {"group": "h", "value": None, "dead_letters": 50, "rank": 2}]))
    assert [b["title"] for b in keys["layout"]["bars"]] == ["k9 (h)", "k1 (g)"]


def test_no_rows_no_charts():
    assert dlq_charts({name: table(name, []) for name in ("daily", "retries", "ttd_histogram", "top_keys")}) == []
