"""A job's output directory replaced whole: written in a hidden directory beside it and renamed
into place at the end, so a reader sees the old output or the new one, never half of one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """The directory to write into; it becomes `out` when the block ends without an error and
    is removed when it raises."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    staging.chmod(0o755)  # executors may run as another user on a shared file system
    try:
        yield staging
        replace_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def replace_dir(new: Path, out: Path) -> None:
    """Put directory `new` at `out`, removing what was there."""
    if not out.exists() and not out.is_symlink():
        new.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    old.rmdir()
    out.rename(old)
    new.rename(out)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()
