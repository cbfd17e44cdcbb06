"""A remoting command: the value both header encodings carry, plus the body."""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.remoting.codes import VERSION_V4_9_8, LanguageCode, SerializeType

# Flag bits (RemotingCommand.RPC_TYPE / RPC_ONEWAY).
RESPONSE_FLAG = 0x1
ONEWAY_FLAG = 0x2


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0  # request id; a response carries the opaque of its request
    flag: int = 0
    language: LanguageCode = LanguageCode.PYTHON
    version: int = VERSION_V4_9_8
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)


def request(code: int, fields: dict[str, object] | None = None, body: bytes = b"") -> RemotingCommand:
    """A request with its custom header given as fields: None values are left out, the rest become
    strings the way RocketMQ's makeCustomHeaderToNet writes them (booleans as true/false)."""
    ext = {}
    for name, value in (fields or {}).items():
        if value is None:
            continue
        ext[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return RemotingCommand(code=code, ext_fields=ext, body=body)


def response_to(req: RemotingCommand, code: int, remark: str | None = None) -> RemotingCommand:
    return RemotingCommand(code=code, opaque=req.opaque, flag=RESPONSE_FLAG, remark=remark,
                           serialize_type=req.serialize_type)
