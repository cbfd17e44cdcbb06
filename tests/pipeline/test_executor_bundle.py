"""The code archive for executors without mqlens: the two packages with the compiled extension,
nothing else, importable from where it is unpacked by a Python that cannot import mqlens."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from pipeline.executor_bundle import UNPACKED_AS, shipped_code, shipping_conf, write_bundle
from tests.pipeline.test_masters import python_without_mqlens


def test_the_archive_holds_the_packages_and_the_extension_only(tmp_path):
    with tarfile.open(write_bundle(tmp_path)) as archive:
        names = archive.getnames()
    assert "pipeline/source.py" in names and "store/format/recordio.py" in names
    assert any(n.startswith("store/format/_recordio") and n.endswith(".so") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".c"))]


def test_unpacked_it_imports_where_mqlens_is_not_installed(tmp_path):
    bundle = write_bundle(tmp_path)
    unpacked = tmp_path / UNPACKED_AS
    with tarfile.open(bundle) as archive:
        archive.extractall(unpacked, filter="data")
    python = python_without_mqlens(tmp_path)
    probe = "import pipeline.source, store.format.recordio as r; print(r.__file__)"
    bare = subprocess.run([str(python), "-c", probe], cwd=tmp_path / "..", capture_output=True, text=True)
    assert "No module named 'pipeline'" in bare.stderr
    shipped = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                             env={"PYTHONPATH": UNPACKED_AS, "PATH": "/usr/bin:/bin"})
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip().startswith(str(unpacked))


def test_the_settings_name_the_archive_and_the_path_and_the_folder_goes_after(tmp_path):
    assert shipping_conf(tmp_path / "a.tar.gz") == {"spark.archives": f"{tmp_path / 'a.tar.gz'}#{UNPACKED_AS}",
                                                    "spark.executorEnv.PYTHONPATH": UNPACKED_AS}
    with shipped_code() as conf:
        archive = conf["spark.archives"].split("#")[0]
        assert tarfile.is_tarfile(archive)
    assert not Path(archive).exists()
