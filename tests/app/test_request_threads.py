"""Requests that block run on at most `request_threads` worker threads at once; the others wait
for one (issue #14: a pool of 40 raised the memory held at the busiest moment of a soak)."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
import pytest

from app.routes import topics as topics_routes
from tests.app.conftest import make_settings, running

pytestmark = pytest.mark.anyio


async def test_blocking_requests_share_the_configured_threads(data_dir, clock, monkeypatch):
    lock = threading.Lock()
    inside, most = 0, 0
    release = threading.Event()
    real = topics_routes.topics.list_topics

    def slow_list(store):
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        release.wait(10)
        with lock:
            inside -= 1
        return real(store)

    monkeypatch.setattr(topics_routes.topics, "list_topics", slow_list)
    async with running(make_settings(data_dir, request_threads=2), clock) as r:
        answers = []

        async def ask():
            answers.append((await r.client.get("/api/topics")).status_code)

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(ask)
            limiter = anyio.to_thread.current_default_thread_limiter()
            with anyio.fail_after(60):  # a wait, not a time limit; two requests inside, the others queued for a thread
                while inside < 2 or limiter.statistics().tasks_waiting < 4:
                    await anyio.sleep(0.01)
            assert most == 2 and limiter.borrowed_tokens == 2
            release.set()
    assert answers == [200] * 6
    assert most == 2
