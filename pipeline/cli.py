"""`mqlens pipeline run JOB --store DIR --out DIR [--master URL]`: a pipeline job from the shell."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="PySpark jobs over a store's files.")
JOBS = ("trace",)


@app.command("run")
def run(
    job: Annotated[str, typer.Argument(help=f"The job: {', '.join(JOBS)}.")],
    store: Annotated[Path, typer.Option("--store", help="The store directory (read-only; a RocketMQ store too).")],
    out: Annotated[Path, typer.Option("--out", help="Where the job writes its output (replaced).")],
    master: Annotated[str, typer.Option("--master", help="Spark master: local[*], local[2], spark://host:7077 ...")]
    = "local[*]",
    body: Annotated[bool, typer.Option("--body", help="trace: include message bodies.")] = False,
) -> None:
    """Run a job and print a one-line summary."""
    if job not in JOBS:
        raise typer.BadParameter(f"unknown job {job!r}: use one of {', '.join(JOBS)}", param_hint="JOB")
    if not (store / "commitlog").is_dir():
        raise typer.BadParameter(f"{store} is not a store: it has no commitlog directory", param_hint="--store")
    from pipeline.jobs import trace
    from pipeline.session import job_session

    began = time.monotonic()
    with job_session(master) as spark:
        rows = trace.main(spark, store, out, with_body=body)
    print(f"{job}: {rows} records from {store} written to {out} in {time.monotonic() - began:.1f} s")
