"""Serving a store read-only: every request that could change something is refused (409)
before its route runs, so the store is never touched. Signing in and out, managing accounts and
pipeline runs (which read the store and write to the data directory) change only the operator
database and the data directory, and stay open; so do content searches, which only read."""

from __future__ import annotations

from fastapi import Request

from app.services.errors import ConflictError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ACCOUNT_PATHS = ("/login", "/logout", "/api/users", "/api/tokens", "/admin/")
PIPELINE_PATHS = ("/api/pipeline/", "/analytics/")
SEARCH_PATHS = ("/api/content-searches", "/content-search")  # a search reads the store only


async def refuse_writes_when_read_only(request: Request) -> None:
    settings = request.app.state.settings
    if settings.read_only and request.method not in SAFE_METHODS and not request.url.path.startswith(
            ACCOUNT_PATHS + PIPELINE_PATHS + SEARCH_PATHS):
        raise ConflictError("the console is read-only: it serves its store without changing it, so "
                            f"{request.method} {request.url.path} is refused")
