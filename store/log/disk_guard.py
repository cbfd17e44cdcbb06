"""Refuse writes before the disk fills: a full disk must leave reads working and corrupt nothing."""

from __future__ import annotations

import os
import time
from pathlib import Path

from store.errors import DiskFullError

CHECK_INTERVAL_S = 1.0


class DiskGuard:
    """Raises DiskFullError when the store's file system is more than `max_used_ratio` used or
    has less than `min_free_bytes` free. While there is room statvfs is asked at most once per
    second; once writes are refused it is asked every time, so freed space is used at once."""

    def __init__(self, path: Path, max_used_ratio: float, min_free_bytes: int):
        if not 0 < max_used_ratio <= 1:
            raise ValueError("the disk's maximum used ratio is between 0 (exclusive) and 1")
        self.path = Path(path)
        self.max_used_ratio = max_used_ratio
        self.min_free_bytes = min_free_bytes
        self._checked_at = float("-inf")
        self._problem: str | None = None

    def check(self) -> None:
        now = time.monotonic()
        if self._problem is not None or now - self._checked_at >= CHECK_INTERVAL_S:
            self._problem = self._measure()
            self._checked_at = now
        if self._problem is not None:
            raise DiskFullError(self._problem)

    def recheck(self) -> None:
        """Forget the cached answer (after files were deleted, or a write failed for want of space)."""
        self._checked_at = float("-inf")

    def _measure(self) -> str | None:
        stats = os.statvfs(self.path)
        total = stats.f_blocks * stats.f_frsize
        free = stats.f_bavail * stats.f_frsize
        used_ratio = 1 - free / total if total else 1.0
        if used_ratio > self.max_used_ratio or free < self.min_free_bytes:
            return (f"the disk holding the store is {used_ratio:.1%} used with {free // 2**20} MiB free "
                    f"(limits: {self.max_used_ratio:.0%} used, {self.min_free_bytes // 2**20} MiB free): "
                    "writes are refused until space is freed; reads go on")
        return None
