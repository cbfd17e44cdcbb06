"""Domain errors raised by the store. Callers map them to exit codes or HTTP statuses."""

from __future__ import annotations

import errno


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class CorruptRecordError(StoreError):
    """A commit log record could not be decoded or failed its checks."""

    def __init__(self, path: str, pos: int, reason: str):
        self.path = path
        self.pos = pos
        self.reason = reason
        super().__init__(f"corrupt record in {path} at position {pos}: {reason}")


class StoreLockedError(StoreError):
    """Another process holds the store's lock file."""


class StoreNotFoundError(StoreError):
    """The store directory does not exist or is not a store."""


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""


class InvalidIdError(StoreError, ValueError):
    """A message id, unique key or offset could not be parsed."""


class MessageNotFoundError(StoreError):
    """No message lives at the requested place."""


class InvalidMessageError(StoreError, ValueError):
    """A message to put breaks a rule (topic name, property size, body size...)."""


class FlowControlError(StoreError):
    """Too much work is in progress: the caller should retry after `retry_after_s` seconds."""

    retry_after_s: int = 1

    def __init__(self, message: str = "too many requests in progress, retry later", retry_after_s: int | None = None):
        super().__init__(message)
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s


class DiskFullError(FlowControlError):
    """The disk is full or nearly full: writes are refused, reads go on."""

    retry_after_s: int = 30


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_no_space(exc: BaseException) -> bool:
    """True for an OSError saying the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


class TransactionError(StoreError):
    """A transaction cannot be ended as asked (the base of the errors below)."""


class InvalidTransactionIdError(TransactionError, InvalidIdError):
    """A transaction id that is not an offset message id of this store, or that names a half
    message of another producer group (RocketMQ 5: INVALID_TRANSACTION_ID)."""


class NotAHalfMessageError(InvalidTransactionIdError):
    """A transaction id naming a record that is not a transaction's half message."""


class TransactionNotFoundError(TransactionError, MessageNotFoundError):
    """No record lives where the transaction id points (never written, or expired: NOT_FOUND)."""


class TransactionEndedError(TransactionError):
    """The transaction was already committed, rolled back, or discarded after too many checks."""


class InvalidConfigError(StoreError, ValueError):
    """A setting given to a running store is invalid (a delay level table...)."""
