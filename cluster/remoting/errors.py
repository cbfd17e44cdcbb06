"""What can go wrong talking to a name server or broker."""

from __future__ import annotations


class RemotingError(Exception):
    """Base class of every remoting failure."""


class CodecError(RemotingError):
    """Bytes that are not a valid remoting frame, header or body."""


class FrameTooLarge(CodecError):
    """A frame announced a length over the configured bound; it is refused before being read."""

    def __init__(self, length: int, limit: int):
        super().__init__(f"frame of {length} bytes refused (limit {limit})")
        self.length = length
        self.limit = limit


class ConnectFailed(RemotingError):
    """The address could not be reached."""

    def __init__(self, address: str, reason: str):
        super().__init__(f"cannot connect to {address}: {reason}")
        self.address = address


class ConnectionLost(RemotingError):
    """The connection closed while a request waited for its answer."""

    def __init__(self, address: str, reason: str = "connection closed"):
        super().__init__(f"{address}: {reason}")
        self.address = address


class RemotingTimeout(RemotingError):
    """No answer within the request's timeout."""

    def __init__(self, address: str, code: int, timeout_s: float):
        super().__init__(f"{address}: no answer to request code {code} within {timeout_s:g} s")
        self.address = address
        self.code = code


class ResponseError(RemotingError):
    """The server answered with a response code other than success."""

    def __init__(self, address: str, request_code: int, response_code: int, remark: str | None):
        detail = f": {remark}" if remark else ""
        super().__init__(f"{address}: request code {request_code} answered {response_code}{detail}")
        self.address = address
        self.request_code = request_code
        self.response_code = response_code
        self.remark = remark
