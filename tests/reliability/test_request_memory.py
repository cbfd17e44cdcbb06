"""Oversized and heavy requests keep the server's memory bounded (issue #14): a declared body
over the limit is refused before it is read, a body sent without a length is cut off at the
limit, a produce batch is bounded in total bytes, and large bodies in progress at once share a
budget (beyond it: 429), so concurrent hostile callers cannot make the server take gigabytes.

The server is `mqlens serve` in its own process; its peak resident size (VmHWM) is read from
/proc before and after the load."""

from __future__ import annotations

import base64
import json
import socket
import threading
from pathlib import Path

import httpx

from tests.live_server import ADMIN_TOKEN, LiveServer

CALLERS = 8  # at once, per kind of request
DECLARED = 100 * 1024 * 1024  # what the oversized callers claim or stream
PEAK_GROWTH_BOUND = 256 * 1024 * 1024  # the peak resident size grows less than this under all of it
SOCKET_DEADLINE_S = 60


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def request_head(port: int, path: str, extra: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


def status_of(sock: socket.socket) -> int:
    """The status of the answer the server sent (it may answer before the body is all sent)."""
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"the server closed the connection without an answer: {answer!r}")
        answer += chunk
    return int(answer.split(b" ", 2)[1])


def send_until_answered(sock: socket.socket, pieces) -> None:
    """Send body pieces until they run out or the server stops taking them (it answered)."""
    try:
        for piece in pieces:
            sock.sendall(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass


def huge_json_pieces(total: int, chunked: bool):
    """A produce batch of `total` bytes, in 1 MiB pieces (chunk-framed when `chunked`)."""
    body = base64.b64encode(b"\0" * (768 * 1024)).decode()
    item = json.dumps({"body_base64": body}).encode()
    sent, first = 0, True
    while sent < total:
        piece = (b"[" if first else b",") + item
        first = False
        sent += len(piece)
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
    if chunked:
        yield b"1\r\n]\r\n0\r\n\r\n"


def oversized(port: int, chunked: bool, statuses: list[int]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_DEADLINE_S) as sock:
        length = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {DECLARED}\r\n"
        sock.sendall(request_head(port, "/api/topics/Big/messages", length))
        send_until_answered(sock, huge_json_pieces(DECLARED, chunked))
        statuses.append(status_of(sock))


def largest_accepted_batch(client: httpx.Client, statuses: list[int]) -> None:
    """A batch just under the limits: 4 bodies of 1 MiB less a little."""
    body = base64.b64encode(b"\1" * (1024 * 1024 - 4096)).decode()
    r = client.post("/api/topics/Big/messages", json=[{"body_base64": body}] * 4)
    statuses.append(r.status_code)


def test_concurrent_oversized_requests_keep_the_server_memory_bounded(tmp_path):
    with LiveServer(tmp_path / "data", tmp_path / "server.log") as server:
        server.start()
        pid = server.proc.pid
        with server.client() as client:  # warm: the first produce loads what every later one uses
            assert client.post("/api/topics/Big/messages", json={"body": "warm"}).status_code == 200
        before = memory_kib(pid, "VmRSS") * 1024
        statuses: dict[str, list[int]] = {"declared": [], "chunked": [], "accepted": []}
        with server.client(timeout=SOCKET_DEADLINE_S) as client:
            threads = [threading.Thread(target=oversized, args=(server.port, False, statuses["declared"]))
                       for _ in range(CALLERS)]
            threads += [threading.Thread(target=oversized, args=(server.port, True, statuses["chunked"]))
                        for _ in range(CALLERS)]
            threads += [threading.Thread(target=largest_accepted_batch, args=(client, statuses["accepted"]))
                        for _ in range(CALLERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(SOCKET_DEADLINE_S)
            assert not any(t.is_alive() for t in threads)
        peak = memory_kib(pid, "VmHWM") * 1024
        assert statuses["declared"] == [413] * CALLERS
        assert set(statuses["chunked"]) <= {413, 429} and len(statuses["chunked"]) == CALLERS
        assert set(statuses["accepted"]) <= {200, 429} and 200 in statuses["accepted"]
        assert peak - before < PEAK_GROWTH_BOUND, f"peak {peak >> 20} MiB from {before >> 20} MiB"
        assert server.healthy()
