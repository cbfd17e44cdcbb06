"""A request refused before its body is read (413, 429, 401...) still gets its answer to a client
that sends the whole body before it reads (urllib, requests: no `Expect: 100-continue`): the
server reads the rest of the body, bounded in bytes and time, before it closes the connection.

The bounds are checked on the middleware around a small ASGI app that answers without reading;
the answer itself on the real server (`mqlens serve`) with urllib."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from starlette.responses import PlainTextResponse

from app.lingering_close import LingeringCloseMiddleware
from tests.live_server import ADMIN_HEADERS, LiveServer

BODY_BYTES = 24 * 1024 * 1024  # well over the loopback socket buffers, and over the produce limit (8 MiB)
CALLERS = 3
CHUNK = 64 * 1024


async def refuse_unread(scope, receive, send) -> None:
    """An app that answers 413 without reading the body, as the body limit does."""
    await PlainTextResponse("too large", status_code=413)(scope, receive, send)


class Client:
    """The server side of one request as the middleware sees it: body chunks as the client sends
    them (`stalls_after`: then nothing more, as from a client that stopped sending)."""

    def __init__(self, declared: int, stalls_after: int | None = None, chunked: bool = False):
        self.declared, self.stalls_after, self.chunked = declared, stalls_after, chunked
        self.sent = 0
        self.events: list[dict] = []

    @property
    def scope_headers(self) -> list[tuple[bytes, bytes]]:
        if self.chunked:  # the length is the client's to know: the server learns it at the end
            return [(b"transfer-encoding", b"chunked")]
        return [(b"content-length", str(self.declared).encode())]

    async def receive(self) -> dict:
        if self.stalls_after is not None and self.sent >= self.stalls_after:
            await anyio.Event().wait()  # never set: only the middleware's time bound ends this
        size = min(CHUNK, self.declared - self.sent)
        self.sent += size
        return {"type": "http.request", "body": b"x" * size, "more_body": self.sent < self.declared}

    async def send(self, event: dict) -> None:
        self.events.append(event)

    async def run(self, app) -> None:
        scope = {"type": "http", "method": "POST", "path": "/", "headers": self.scope_headers}
        await app(scope, self.receive, self.send)

    def status(self) -> int:
        return next(e["status"] for e in self.events if e["type"] == "http.response.start")

    def headers(self) -> dict[bytes, bytes]:
        return dict(next(e["headers"] for e in self.events if e["type"] == "http.response.start"))

    def body(self) -> bytes:
        return b"".join(e.get("body", b"") for e in self.events if e["type"] == "http.response.body")

    def ended(self) -> bool:
        last = self.events[-1]
        return last["type"] == "http.response.body" and not last.get("more_body", False)


@pytest.mark.anyio
async def test_the_rest_of_a_refused_body_is_read_before_the_answer_ends():
    client = Client(declared=3 * 1024 * 1024)
    await client.run(LingeringCloseMiddleware(refuse_unread, max_bytes=64 * 1024 * 1024, max_s=60))
    assert client.sent == client.declared
    assert client.status() == 413 and client.body() == b"too large" and client.ended()
    assert client.headers()[b"connection"] == b"close"


@pytest.mark.anyio
async def test_the_read_stops_at_its_byte_bound():
    client = Client(declared=100 * 1024 * 1024, chunked=True)
    await client.run(LingeringCloseMiddleware(refuse_unread, max_bytes=1024 * 1024, max_s=60))
    assert 1024 * 1024 <= client.sent <= 1024 * 1024 + CHUNK
    assert client.status() == 413 and client.body() == b"too large" and client.ended()


@pytest.mark.anyio
async def test_a_body_declared_over_the_byte_bound_is_not_read():
    client = Client(declared=100 * 1024 * 1024)
    await client.run(LingeringCloseMiddleware(refuse_unread, max_bytes=1024 * 1024, max_s=60))
    assert client.sent == 0
    assert client.status() == 413 and client.body() == b"too large" and client.ended()
    assert client.headers()[b"connection"] == b"close"


@pytest.mark.anyio
async def test_the_read_stops_at_its_time_bound_when_the_client_stops_sending():
    client = Client(declared=10 * 1024 * 1024, stalls_after=CHUNK)
    await client.run(LingeringCloseMiddleware(refuse_unread, max_bytes=64 * 1024 * 1024, max_s=0.05))
    assert client.sent == CHUNK
    assert client.status() == 413 and client.body() == b"too large" and client.ended()


@pytest.mark.anyio
async def test_an_answer_after_the_whole_body_is_left_alone():
    async def echo_length(scope, receive, send):
        size, more = 0, True
        while more:
            event = await receive()
            size, more = size + len(event.get("body", b"")), event.get("more_body", False)
        await PlainTextResponse(str(size))(scope, receive, send)

    client = Client(declared=200_000)
    await client.run(LingeringCloseMiddleware(echo_length, max_bytes=1024, max_s=60))
    assert client.status() == 200 and client.body() == b"200000" and b"connection" not in client.headers()
    assert sum(1 for e in client.events if e["type"] == "http.response.body") == 1


def post_large_body(url: str, answers: list) -> None:
    request = urllib.request.Request(url, data=b"x" * BODY_BYTES, method="POST",
                                     headers={**ADMIN_HEADERS, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            answers.append((r.status, r.read()))
    except urllib.error.HTTPError as exc:
        answers.append((exc.code, exc.read()))
    except OSError as exc:  # "connection reset by peer", "broken pipe"
        answers.append((None, repr(exc).encode()))


def test_clients_that_send_a_too_large_body_without_expect_read_the_413(tmp_path: Path):
    with LiveServer(tmp_path / "data", tmp_path / "server.log") as server:
        server.start()
        answers: list = []
        threads = [threading.Thread(target=post_large_body, args=(f"{server.base_url}/api/topics/Orders/messages",
                                                                    answers)) for _ in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(answers) == CALLERS
        for status, body in answers:
            assert status == 413, body
            assert b"larger than 8388608 bytes" in body
        assert server.healthy()
