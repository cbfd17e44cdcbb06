"""Console pages: the dashboard at / (and /dashboard): the store's size, segments, dispatch lag,
messages per second in and out, dead letters, RocketMQ 5 clients online; its cards re-fetched
every few seconds by htmx."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from app.pages import RendererDep
from app.presenters import client_counts
from app.security import READ
from app.services.store_status import store_status

router = APIRouter(include_in_schema=False)

REFRESH_SECONDS = 3


def dashboard_data(request: Request, store) -> dict:
    now_ms = request.app.state.clock.now_ms()
    rates = request.app.state.rates.rates(store.stats, now_ms)
    return {"nav": "dashboard", "now_ms": now_ms, "status": asdict(store_status(store)), "rates": asdict(rates),
            "clients": client_counts(request.app.state.client_sessions), "refresh_seconds": REFRESH_SECONDS}


@router.get("/", dependencies=[READ])
@router.get("/dashboard", dependencies=[READ])
def dashboard_page(request: Request, renderer: RendererDep):
    store = request.app.state.store
    if store is None:  # attached to a live cluster: its page is the start page
        return RedirectResponse("/cluster", status_code=303)
    return renderer.page(request, "dashboard/dashboard.html", dashboard_data(request, store), fragment="cards")
