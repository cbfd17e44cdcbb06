"""The protocol's status codes for what the store and the services refuse: every RPC answers a
Status, never an unhandled exception."""

from __future__ import annotations

from app.grpc.protocol import definition_pb2 as pb
from app.services.errors import ForbiddenError, InvalidRequestError, NotFoundError, PayloadTooLargeError
from store.broker.pull import NotReadableError
from store.broker.receipt import ReceiptHandleError
from store.errors import (
    DiskFullError,
    FlowControlError,
    InvalidIdError,
    InvalidMessageError,
    InvalidTransactionIdError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    StoreError,
    TransactionEndedError,
    TransactionNotFoundError,
)

Code = pb.Code
MAX_STATUS_MESSAGE_CHARS = 1000


class RpcRefusal(Exception):
    """An RPC is answered with `code` and `message` instead of its result."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message[:MAX_STATUS_MESSAGE_CHARS])


OK = status(Code.OK)

# Most specific first: the first class an error is an instance of names its code.
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (RpcRefusal, Code.BAD_REQUEST),  # its own code is used
    (ReceiptHandleError, Code.INVALID_RECEIPT_HANDLE),
    (InvalidTransactionIdError, Code.INVALID_TRANSACTION_ID),
    (TransactionEndedError, Code.INVALID_TRANSACTION_ID),
    (TransactionNotFoundError, Code.NOT_FOUND),
    (DiskFullError, Code.TOO_MANY_REQUESTS),
    (FlowControlError, Code.TOO_MANY_REQUESTS),
    (ReadOnlyStoreError, Code.FORBIDDEN),
    (ForbiddenError, Code.FORBIDDEN),
    (NotReadableError, Code.FORBIDDEN),
    (PayloadTooLargeError, Code.MESSAGE_BODY_TOO_LARGE),
    (MessageNotFoundError, Code.NOT_FOUND),
    (NotFoundError, Code.NOT_FOUND),
    (InvalidIdError, Code.BAD_REQUEST),
    (InvalidMessageError, Code.BAD_REQUEST),
    (InvalidRequestError, Code.BAD_REQUEST),
    (ValueError, Code.BAD_REQUEST),
    (StoreError, Code.INTERNAL_ERROR),
)


def status_of(exc: BaseException) -> pb.Status:
    """The status an RPC answers for `exc`; INTERNAL_ERROR for what no rule names."""
    if isinstance(exc, RpcRefusal):
        return status(exc.code, exc.message)
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return status(code, str(exc) or kind.__name__)
    return status(Code.INTERNAL_ERROR, "internal error: see the server's log")
