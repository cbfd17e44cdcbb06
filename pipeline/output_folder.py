"""The folder a job writes to (`--out`): marked with the job's name when the job succeeds, so
that a later run of the same job may replace it, and refused when it holds anything else
unless the caller asked to replace it."""

from __future__ import annotations

import json
from pathlib import Path

MARKER = ".mqlens-job"  # Spark and Parquet readers skip names that start with a dot


def job_of(out: Path) -> str | None:
    """The job whose output `out` is, by its marker; None when it has no readable one."""
    try:
        return json.loads((Path(out) / MARKER).read_text(encoding="utf-8"))["job"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_output_folder(out: Path, job: str, *, overwrite: bool) -> None:
    """Raise ValueError, in words, when writing job `job` to `out` would replace something the
    user may want: a file, or a folder with content that is not an earlier output of this job."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"{out} is a file, not a folder: give a new folder, or remove the file")
    if overwrite or not any(out.iterdir()):
        return
    found = job_of(out)
    if found == job:
        return
    what = f"the output of the {found} job" if found else "files that are not the output of a pipeline job"
    raise ValueError(f"{out} holds {what}: give a new or empty folder, or --overwrite to replace what is there")


def mark_output(out: Path, job: str) -> None:
    """Name `job` as the author of the output in `out`."""
    (Path(out) / MARKER).write_text(json.dumps({"job": job}) + "\n", encoding="utf-8")
