"""mqlens's own code for Spark executors that do not have it installed: the `pipeline` and
`store` packages, the compiled extension included, packed as an archive that Spark sends with
the job and unpacks in each executor's working directory (`spark.archives`), where the
executors' Python workers find it (`spark.executorEnv.PYTHONPATH`).

The executors still need what the code imports besides itself: the same Python minor version
(the extension is built for it), pyarrow and numpy."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pipeline
import store

UNPACKED_AS = "mqlens_code"  # the folder each executor unpacks the archive into
PACKAGES = (pipeline, store)
SKIPPED = ("__pycache__",)


def _wanted(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = Path(member.name)
    if any(part in SKIPPED for part in name.parts):
        return None
    if member.isfile() and name.suffix not in (".py", ".so"):
        return None
    return member


def write_bundle(folder: Path) -> Path:
    """The archive of the packages this process runs, written into `folder`."""
    target = Path(folder) / "mqlens-code.tar.gz"
    with tarfile.open(target, "w:gz") as archive:
        for package in PACKAGES:
            root = Path(package.__file__).parent
            archive.add(root, arcname=root.name, filter=_wanted)
    return target


def shipping_conf(bundle: Path) -> dict[str, str]:
    """The Spark settings that send `bundle` to every executor and put it on its workers' path."""
    return {"spark.archives": f"{bundle}#{UNPACKED_AS}", "spark.executorEnv.PYTHONPATH": UNPACKED_AS}


@contextmanager
def shipped_code() -> Iterator[dict[str, str]]:
    """Spark settings shipping mqlens's code, for as long as the session using them runs."""
    folder = Path(tempfile.mkdtemp(prefix="mqlens-code-"))
    try:
        yield shipping_conf(write_bundle(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
