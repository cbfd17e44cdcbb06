"""Produce requests in flight share appends and syncs: the requests that arrive during one turn
of the event loop are appended with one put_many at the end of that turn, on the loop itself (an
append only copies bytes), and each is answered when the flush policy says its messages are
stored (with sync flush, when the store's group commit has synced past them). A store held by
another thread is not waited for on the loop: that turn's requests are put from a worker thread.
Requests stay all-or-none: when the combined append is refused, each is put on its own so that
one bad request does not fail its neighbours."""

from __future__ import annotations

import asyncio
import threading

from starlette.concurrency import run_in_threadpool

from store.broker.record_builder import NewMessage
from store.errors import StoreError
from store.message_store import MessageStore, PutResult

Pending = tuple[list[NewMessage], asyncio.Future]
LOOP_TURN_MESSAGES = 2_000  # a turn with more is appended from a worker thread, not on the loop


class PutBatcher:
    def __init__(self, store: MessageStore):
        self._store = store
        self._pending: list[Pending] = []
        self.appends = 0  # combined appends made (each covers one or more requests)

    async def put(self, messages: list[NewMessage]) -> list[PutResult]:
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        if not self._pending:
            loop.call_soon(self._append_turn, loop)
        self._pending.append((messages, answer))
        return await answer

    def _append_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        turn, self._pending = self._pending, []
        if sum(len(messages) for messages, _ in turn) > LOOP_TURN_MESSAGES:
            loop.create_task(self._append_in_thread(loop, turn))
            return
        try:
            results = self._store.put_many_nowait([m for messages, _ in turn for m in messages])
        except StoreError as exc:
            if len(turn) > 1:  # which request is bad: each on its own, from a worker thread
                results = None
            else:
                self._answer_when_durable(loop, turn, [exc])
                return
        except Exception as exc:
            self._answer_when_durable(loop, turn, [exc] * len(turn))
            return
        if results is None:
            loop.create_task(self._append_in_thread(loop, turn))
        else:
            self.appends += 1
            self._answer_when_durable(loop, turn, _split(results, turn))

    async def _append_in_thread(self, loop: asyncio.AbstractEventLoop, turn: list[Pending]) -> None:
        outcomes = await run_in_threadpool(self._append_waiting, turn)
        self._answer_when_durable(loop, turn, outcomes)

    def _append_waiting(self, turn: list[Pending]) -> list[list[PutResult] | Exception]:
        """Each request's results or error, waiting for the store: one put of them all, or one
        put each when the store refuses the combined put."""
        try:
            results = self._store.put_many([m for messages, _ in turn for m in messages])
        except StoreError as exc:
            if len(turn) == 1:
                return [exc]
            return [self._append_alone(messages) for messages, _ in turn]
        except Exception as exc:
            return [exc] * len(turn)
        self.appends += 1
        return _split(results, turn)

    def _append_alone(self, messages: list[NewMessage]) -> list[PutResult] | Exception:
        try:
            results = self._store.put_many(messages)
        except Exception as exc:
            return exc
        self.appends += 1
        return results

    def _answer_when_durable(self, loop: asyncio.AbstractEventLoop, turn: list[Pending], outcomes: list) -> None:
        def answer(sync_error: BaseException | None) -> None:
            for (_, future), outcome in zip(turn, outcomes, strict=True):
                if future.done():  # its client went away
                    continue
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                elif sync_error is not None:
                    future.set_exception(sync_error)
                else:
                    future.set_result(outcome)

        def answer_on_loop(sync_error: BaseException | None) -> None:
            if threading.get_ident() == loop_thread:
                answer(sync_error)
            else:
                loop.call_soon_threadsafe(answer, sync_error)

        loop_thread = threading.get_ident()
        if not any(isinstance(outcome, list) for outcome in outcomes):
            answer(None)
        else:
            self._store.when_durable(answer_on_loop)


def _split(results: list[PutResult], turn: list[Pending]) -> list[list[PutResult]]:
    """The combined put's results cut back into each request's."""
    outcomes, at = [], 0
    for messages, _ in turn:
        outcomes.append(results[at:at + len(messages)])
        at += len(messages)
    return outcomes
