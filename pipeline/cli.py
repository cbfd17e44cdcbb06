"""`mqlens pipeline run JOB --store DIR --out DIR [--overwrite] [--master URL] [geometry flags]`: a pipeline job
from the shell, with a progress bar on the terminal and a one-line summary at the end; with `--follow`,
run again whenever the store grows, until stopped (pipeline.follow)."""

from __future__ import annotations

import os
import re
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from pipeline.jobs import ALL_JOBS, FOLLOW_JOBS, QUERY_JOBS
from pipeline.output_folder import check_output_folder
from store.log.geometry import DEFAULT_CQ_FILE_SIZE, DEFAULT_INDEX_ENTRIES, DEFAULT_INDEX_SLOTS, StoreGeometry

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="PySpark jobs over a store's files.")
EXIT_FAILED = 1


@app.command("run")
def run(
    job: Annotated[str, typer.Argument(help=f"The job: {', '.join(ALL_JOBS)}.")],
    store: Annotated[Path, typer.Option("--store", help="The store directory (read-only; a RocketMQ store too).")],
    out: Annotated[Path, typer.Option("--out", help="The folder the job writes to: a new or empty one, or an "
                                      "earlier output of the same job (replaced).")],
    master: Annotated[str, typer.Option("--master", help="Spark master: local[*], local[2], spark://host:7077 ...")]
    = "local[*]",
    cq_file_size: Annotated[int, typer.Option("--cq-file-size", min=20, help="Consume queue file bytes.")]
    = DEFAULT_CQ_FILE_SIZE,
    index_slots: Annotated[int, typer.Option("--index-slots", min=1, help="Hash slots per index file.")]
    = DEFAULT_INDEX_SLOTS,
    index_entries: Annotated[int, typer.Option("--index-entries", min=2, help="Entries per index file.")]
    = DEFAULT_INDEX_ENTRIES,
    commitlog_file_size: Annotated[int | None, typer.Option(
        "--commitlog-file-size", min=4096, help="Accepted for symmetry with the store commands; segments "
        "are found by their names.")] = None,
    delay_levels: Annotated[str | None, typer.Option(
        "--delay-levels", help="The broker's delay table ('1s 5s 10s ...'); default: the store's own.")] = None,
    body: Annotated[bool, typer.Option("--body", help="Include message bodies (trace).")] = False,
    skip_corrupt: Annotated[bool, typer.Option(
        "--skip-corrupt", help="Skip corrupt ranges of the commit log and report them, instead of failing.")]
    = False,
    split_bytes: Annotated[int | None, typer.Option(
        "--split-bytes", min=4096, help="Read segments larger than this with several tasks (default 128 MiB).")]
    = None,
    status: Annotated[Path | None, typer.Option(
        "--status", help="Keep the job's progress as JSON in this file (replaced atomically).")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Draw a progress bar (default: when stderr is a terminal).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace what the --out folder holds, even when it is not this job's output.")] = False,
    follow: Annotated[bool, typer.Option(
        "--follow", help=f"Keep the output current until stopped (Ctrl-C, SIGTERM): {', '.join(sorted(FOLLOW_JOBS))}.")]
    = False,
    trigger_seconds: Annotated[int, typer.Option(
        "--trigger-seconds", min=1, max=86_400, help="With --follow: look for new records this often.")] = 10,
    ship_code: Annotated[bool, typer.Option(
        "--ship-code", help="Send mqlens's code with the job, for executors where it is not installed (they need "
        "Python 3.11, pyarrow and numpy).")] = False,
    text: Annotated[str | None, typer.Option(
        "--text", help="content-search: the text to find (a regular expression with --regex).")] = None,
    regex: Annotated[bool, typer.Option("--regex", help="content-search: --text is a regular expression.")] = False,
    look_in: Annotated[str, typer.Option(
        "--in", help="content-search: body, properties or both.")] = "both",
    topics: Annotated[list[str] | None, typer.Option(
        "--topic", help="content-search: only this topic (repeat for more); default every topic.")] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="content-search: stored at or after (ISO 8601, UTC unless it says, or epoch ms).")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="content-search: stored at or before (ISO 8601, UTC unless it says, or epoch ms).")] = None,
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", help="With --follow: the streaming query's checkpoint folder (default: .OUT.checkpoint "
        "beside --out).")] = None,
) -> None:
    """Run a job over a store's files and print a one-line summary."""
    if job not in ALL_JOBS:
        raise typer.BadParameter(f"unknown job {job!r}: use one of {', '.join(ALL_JOBS)}", param_hint="JOB")
    if not (store / "commitlog").is_dir():
        raise typer.BadParameter(f"{store} is not a store: it has no commitlog directory", param_hint="--store")
    from pipeline.options import SourceOptions
    from pipeline.run import run_job
    from pipeline.session import job_session
    from pipeline.status import ProgressBar

    job_args = {}
    if job in QUERY_JOBS:
        try:
            job_args["query"] = content_query(text, regex, look_in, topics or [], since, until)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    elif any(v is not None for v in (text, topics, since, until)) or regex or look_in != "both":
        raise typer.BadParameter(f"--text, --regex, --in, --topic, --since and --until are for "
                                 f"{', '.join(QUERY_JOBS)}, not {job}")
    if follow and job not in FOLLOW_JOBS:
        raise typer.BadParameter(f"--follow is for {', '.join(sorted(FOLLOW_JOBS))}, not {job}", param_hint="--follow")
    try:
        geometry = StoreGeometry(commitlog_file_size or StoreGeometry().commitlog_file_size, cq_file_size,
                                 index_slots, index_entries)
        source = SourceOptions(store, geometry, delay_levels, body, skip_corrupt, split_bytes)
        source.delay_table()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        source.check_output(out)
        check_output_folder(out, job, overwrite=overwrite)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--out") from None
    show_bar = sys.stderr.isatty() if progress is None else progress
    if follow:
        _follow(job, source, out, master, checkpoint, trigger_seconds, status, ProgressBar() if show_bar else None,
                ship_code)
        return
    final = run_job(job, source, out, partial(job_session, master, ship_code), status_path=status,
                    bar=ProgressBar() if show_bar else None, job_args=job_args)
    for skipped in final.skipped:
        print(f"skipped {skipped['file']} at position {skipped['position']}: {skipped['length']} bytes "
              f"({skipped['reason']})", file=sys.stderr)
    if final.state != "succeeded":
        print(f"{job} failed: {final.error}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED)
    print(final.summary)


MAX_QUERY_CHARS = 1000
PLACES = {"body": (True, False), "properties": (False, True), "both": (True, True)}


def _moment_ms(text: str, option: str) -> int:
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option} is an ISO 8601 time (2026-11-27T10:00) or epoch milliseconds, not {text[:40]!r}")\
            from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def content_query(text: str | None, regex: bool, look_in: str, topics: list[str], since: str | None,
                  until: str | None):
    """The content-search job's query from its options, or ValueError in words."""
    from store.search.matching import ContentQuery, Matcher

    if not text:
        raise ValueError("content-search needs --text: the text to find")
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"--text is at most {MAX_QUERY_CHARS} characters")
    if look_in not in PLACES:
        raise ValueError(f"--in is one of {', '.join(PLACES)}, not {look_in[:40]!r}")
    in_body, in_properties = PLACES[look_in]
    begin = _moment_ms(since, "--since") if since else 0
    end = _moment_ms(until, "--until") if until else 2**63 - 1
    if begin > end:
        raise ValueError("--since is after --until")
    query = ContentQuery(text, regex, in_body, in_properties, tuple(topics), begin, end)
    try:
        Matcher(query)
    except re.error as exc:
        raise ValueError(f"--text is not a regular expression Python reads: {exc}") from None
    return query


def _follow(job: str, source, out: Path, master: str, checkpoint: Path | None, trigger_seconds: int,
            status: Path | None, bar, ship_code: bool = False) -> None:
    import threading

    from pipeline.follow import Follow, check_checkpoint, default_checkpoint, stop_on_signals
    from pipeline.session import job_session

    checkpoint = checkpoint or default_checkpoint(out)
    try:
        check_checkpoint(checkpoint, job, source, out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--checkpoint") from None
    print(f"following {source.store_dir}: {job} to {out} every {trigger_seconds} s (checkpoint {checkpoint}); "
          f"stop with Ctrl-C", file=sys.stderr)
    stopping = threading.Event()
    with stop_on_signals(stopping):
        error = Follow(job, source, out, checkpoint, trigger_seconds, status, bar).run(
            partial(job_session, master, ship_code), stopping)
    if error is not None:
        print(f"{job} --follow failed: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED)
    print(f"{job} --follow stopped", file=sys.stderr)


@app.command("warm", hidden=True)
def warm(
    inbox: Annotated[Path, typer.Option("--inbox", help="The folder the console writes job requests to.")],
    master: Annotated[str, typer.Option("--master", help="The Spark master of the kept session.")] = "local[*]",
    driver_memory: Annotated[str, typer.Option("--driver-memory", help="The JVM's heap (spark.driver.memory).")]
    = "1g",
    idle_s: Annotated[float, typer.Option("--idle-s", min=1, help="Stop after this long without a job.")] = 900,
    parent: Annotated[int, typer.Option("--parent", help="Stop when this process (the console) has gone.")] = 0,
) -> None:
    """A kept Spark driver that runs the console's jobs one after another (pipeline.warm_driver)."""
    from pipeline.warm_driver import serve
    from pipeline.warm_requests import Inbox

    serve(Inbox(inbox), master, driver_memory, idle_s, parent or os.getppid())
