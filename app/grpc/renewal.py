"""Auto-renew: a PushConsumer receives without an invisible time and expects the server to keep
each message invisible until it acks it or changes its invisible time. The server gives such a
delivery AUTO_RENEW_INVISIBLE_MS and renews it every RENEW_EVERY_MS while the client that holds it
is still connected; a client that went away stops being renewed, so its messages come back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

log = logging.getLogger("mqlens.grpc")

AUTO_RENEW_INVISIBLE_MS = 30_000
RENEW_EVERY_MS = 10_000
MAX_RENEWED = 100_000  # deliveries kept renewed at once; beyond it new ones are not renewed


@dataclass(frozen=True)
class _Held:
    client_id: str
    group: str


class AutoRenewer:
    def __init__(self, renew_many: Callable[[str, list[str], int], list], still_there: Callable[[str], bool]):
        self._renew_many = renew_many  # (group, handles, invisible_ms) -> error or None per handle
        self._still_there = still_there
        self._held: dict[str, _Held] = {}  # receipt handle -> who holds it

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, client_id: str, group: str, handles: list[str]) -> None:
        for handle in handles:
            if len(self._held) >= MAX_RENEWED:
                log.warning("auto-renew: %d deliveries already renewed; later ones are not", MAX_RENEWED)
                return
            self._held[handle] = _Held(client_id, group)

    def release(self, handle: str) -> None:
        self._held.pop(handle, None)

    def release_client(self, client_id: str) -> None:
        for handle in [h for h, held in self._held.items() if held.client_id == client_id]:
            del self._held[handle]

    async def renew_once(self) -> int:
        """Renew what connected clients hold; forget the rest, and what the store refuses."""
        by_group: dict[str, list[str]] = {}
        for handle, held in list(self._held.items()):
            if self._still_there(held.client_id):
                by_group.setdefault(held.group, []).append(handle)
            else:
                del self._held[handle]
        renewed = 0
        for group, handles in by_group.items():
            outcomes = await anyio.to_thread.run_sync(self._renew_many, group, handles, AUTO_RENEW_INVISIBLE_MS)
            for handle, refused in zip(handles, outcomes, strict=True):
                if refused is None:
                    renewed += 1
                else:
                    self._held.pop(handle, None)
        return renewed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_MS / 1000)
            try:
                await self.renew_once()
            except Exception:
                log.exception("auto-renew failed; trying again in %d ms", RENEW_EVERY_MS)
