"""Process settings the command line makes before anything imports numpy (app/cli.py imports
this first).

numpy's OpenBLAS starts a pool of threads that spin for a while after the import even when
nothing calls BLAS, and the store's numpy work is all element-wise: on a 2-core machine that
spinning is CPU taken from the store (0.1 s of a `store load` of 200,000 messages). One thread,
unless the caller asked for more."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
