"""Receipt handles of pop-style receive: opaque url-safe strings naming one delivery of one
message to one group. What a handle says is never trusted on its own: the pop service accepts
it only when it equals the handle it keeps for that message's current delivery."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from store.errors import StoreError

HANDLE_VERSION = "1"
MAX_HANDLE_CHARS = 1024
FIELD_SEPARATOR = " "  # never part of a group or topic name


class ReceiptHandleError(StoreError, ValueError):
    """A receipt handle is malformed, unknown, stale (replaced by a newer one), expired or no
    longer in flight (acknowledged, nacked or dead-lettered): the message says which."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    generation: int  # counts the handles issued for this message to this group
    nonce: str

    def encode(self) -> str:
        fields = (HANDLE_VERSION, self.group, self.topic, str(self.queue_id), str(self.queue_offset),
                  str(self.generation), self.nonce)
        raw = FIELD_SEPARATOR.join(fields).encode("utf-8")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def new_handle(group: str, topic: str, queue_id: int, queue_offset: int, generation: int, nonce: str) -> str:
    return ReceiptHandle(group, topic, queue_id, queue_offset, generation, nonce).encode()


def decode_handle(text: object) -> ReceiptHandle:
    """The fields of a handle. Raises ReceiptHandleError when it is not one this store makes."""
    if not isinstance(text, str) or not text:
        raise ReceiptHandleError("the receipt handle is missing or not a string")
    if len(text) > MAX_HANDLE_CHARS:
        raise ReceiptHandleError(f"malformed receipt handle: longer than {MAX_HANDLE_CHARS} characters")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        fields = raw.decode("utf-8").split(FIELD_SEPARATOR)
    except (binascii.Error, ValueError):
        raise ReceiptHandleError("malformed receipt handle: not one this store issued") from None
    if len(fields) != 7 or fields[0] != HANDLE_VERSION:
        raise ReceiptHandleError("malformed receipt handle: not one this store issued")
    _, group, topic, queue_id, queue_offset, generation, nonce = fields
    numbers = (queue_id, queue_offset, generation)
    if not group or not topic or not nonce or not all(n.isascii() and n.isdigit() for n in numbers):
        raise ReceiptHandleError("malformed receipt handle: not one this store issued")
    return ReceiptHandle(group, topic, int(queue_id), int(queue_offset), int(generation), nonce)
