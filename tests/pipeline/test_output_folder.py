"""`mqlens pipeline run --out`: a folder holding anything but an earlier output of the same job
is refused unless --overwrite, a file is refused, and a job's output is marked as its own."""

from __future__ import annotations

import json

from app.cli import main
from pipeline.output_folder import MARKER


def run(golden_store_dir, out, *extra) -> int:
    return main(["pipeline", "run", "trace", "--store", str(golden_store_dir), "--out", str(out),
                 "--master", "local[1]", *extra])


def test_a_folder_with_other_files_is_refused_and_left_alone(golden_store_dir, tmp_path, capsys):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "q3.xlsx").write_bytes(b"a colleague's work")
    assert run(golden_store_dir, out) == 2
    err = capsys.readouterr().err
    assert "holds files that are not the output of a pipeline job" in err and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == ["q3.xlsx"]
    assert (out / "q3.xlsx").read_bytes() == b"a colleague's work"


def test_another_jobs_output_is_refused(golden_store_dir, tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / MARKER).write_text(json.dumps({"job": "dlq-report"}))
    (out / "summary").mkdir()
    assert run(golden_store_dir, out) == 2
    assert "holds the output of the dlq-report job" in capsys.readouterr().err
    assert (out / "summary").is_dir()


def test_a_file_is_refused_even_with_overwrite(golden_store_dir, tmp_path, capsys):
    out = tmp_path / "notes.txt"
    out.write_text("keep me")
    assert run(golden_store_dir, out, "--overwrite") == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert out.read_text() == "keep me"


def test_the_jobs_own_output_is_replaced_and_overwrite_replaces_anything(spark, golden_store_dir, tmp_path,
                                                                           capsys):
    out = tmp_path / "trace"
    out.mkdir()  # empty: taken
    assert run(golden_store_dir, out) == 0
    assert json.loads((out / MARKER).read_text()) == {"job": "trace"}
    (out / "leftover").write_text("from an earlier run")
    assert run(golden_store_dir, out) == 0  # an earlier output of the same job: replaced
    assert not (out / "leftover").exists() and any(out.rglob("*.parquet"))
    assert spark.read.parquet(str(out)).count() == 61  # the marker is no part of the table

    other = tmp_path / "other"
    other.mkdir()
    (other / "stray").write_text("x")
    assert run(golden_store_dir, other, "--overwrite") == 0
    assert not (other / "stray").exists() and json.loads((other / MARKER).read_text()) == {"job": "trace"}
    capsys.readouterr()
