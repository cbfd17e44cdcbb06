"""Serving a store read-only: every request that could change something is refused (409)
before its route runs, so neither the store nor the operator database is touched."""

from __future__ import annotations

from fastapi import Request

from app.services.errors import ConflictError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def refuse_writes_when_read_only(request: Request) -> None:
    settings = request.app.state.settings
    if settings.read_only and request.method not in SAFE_METHODS:
        raise ConflictError("the console is read-only: it serves its store without changing it, so "
                            f"{request.method} {request.url.path} is refused")
