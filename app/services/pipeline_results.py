"""What a finished run made, read from its output folder on each request (so it stays readable
after a restart): the dlq-report's tables, or the first rows of another job's tables. A missing
or damaged output is said in words, never raised."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

MAX_ROWS = 5000  # of one dlq-report table
PREVIEW_ROWS = 20
PREVIEWED_JOBS = ("trace", "timelines", "key-index")
MAX_TEXT = 200
_RANKED = (("group", "value", "dead_letters", "rank"), [("group", "ascending"), ("rank", "ascending")])
# The dlq-report's tables (a folder each): the columns the console reads, and the order it shows them in.
DLQ_TABLES: dict[str, tuple[tuple[str, ...], list[tuple[str, str]]]] = {
    "summary": (("group", "topic", "dead_letters", "retries_avg", "ttd_p50_ms", "ttd_p90_ms", "ttd_p99_ms"),
                [("dead_letters", "descending"), ("group", "ascending"), ("topic", "ascending")]),
    "daily": (("day", "group", "topic", "dead_letters"),  # newest first: a cut keeps the recent days
              [("day", "descending"), ("group", "ascending"), ("topic", "ascending")]),
    "retries": (("group", "retried_messages", "retry_records", "dead_letters"),
                [("retry_records", "descending"), ("group", "ascending")]),
    "ttd_histogram": (("group", "bucket", "bucket_order", "dead_letters"),
                      [("group", "ascending"), ("bucket_order", "ascending")]),
    "top_keys": _RANKED,
    "top_tags": _RANKED,
    "top_reasons": _RANKED,
}


@dataclass(frozen=True)
class ResultTable:
    name: str
    columns: list[str]
    rows: list[dict]  # the first ones, in the order shown
    total_rows: int


@dataclass(frozen=True)
class RunResults:
    tables: dict[str, ResultTable] = field(default_factory=dict)
    problem: str | None = None  # why (part of) the output cannot be read, in words


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def read_results(job: str, output_path: str) -> RunResults:
    out = Path(output_path)
    if not out.is_dir():
        return RunResults(problem=f"the output folder {out} is gone: it was moved or deleted after the run")
    if job == "dlq-report":
        return _dlq_report(out)
    if job in PREVIEWED_JOBS:
        return _previews(out)
    return RunResults()


def _dlq_report(out: Path) -> RunResults:
    tables: dict[str, ResultTable] = {}
    for name, (columns, order) in DLQ_TABLES.items():
        folder = out / name
        if not folder.is_dir():
            return RunResults(tables, f"the dlq-report output in {out} has no {name}/ table: it is incomplete or "
                                      "damaged")
        try:
            table = ds.dataset(folder, format="parquet").to_table(columns=list(columns)).sort_by(order)
        except (pa.ArrowException, OSError, ValueError) as exc:
            return RunResults(tables, f"the {name}/ table of the dlq-report output cannot be read: "
                                      f"{_first_line(exc)}")
        tables[name] = ResultTable(name, list(columns), table.slice(0, MAX_ROWS).to_pylist(), table.num_rows)
    return RunResults(tables)


def _shown(value: object) -> object:
    """A value as a table cell: bytes as their size, nested values as JSON, long text cut."""
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    if isinstance(value, list | dict):
        value = json.dumps(value, default=str, ensure_ascii=False)
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[: MAX_TEXT - 1] + "…"
    return value


def _previews(out: Path) -> RunResults:
    """The first rows of each table: the folder's own (partitioned by `name=value` folders or
    not), or one per table folder in it."""
    folders = [p for p in sorted(out.iterdir()) if p.is_dir() and "=" not in p.name
               and not p.name.startswith(("_", "."))]
    tables: dict[str, ResultTable] = {}
    for name, folder in ({p.name: p for p in folders} if folders else {"rows": out}).items():
        try:
            dataset = ds.dataset(folder, format="parquet", partitioning="hive")
            head = dataset.head(PREVIEW_ROWS)
            total = dataset.count_rows()
        except (pa.ArrowException, OSError, ValueError) as exc:
            return RunResults(tables, f"the output in {folder} cannot be read: {_first_line(exc)}")
        rows = [{column: _shown(value) for column, value in row.items()} for row in head.to_pylist()]
        tables[name] = ResultTable(name, head.column_names, rows, total)
    return RunResults(tables)
