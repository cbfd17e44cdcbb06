"""The command header in RocketMQ's own binary form (serialize type ROCKETMQ, RocketMQSerializable).

    int16 code | int8 language | int16 version | int32 opaque | int32 flag
    int32 remark length | remark (UTF-8)
    int32 extFields length | (int16 key length | key | int32 value length | value)*

All big-endian. A zero length reads as no remark; an empty extFields value reads back as "".
"""

from __future__ import annotations

import struct

from cluster.remoting.codes import LanguageCode, SerializeType
from cluster.remoting.command import RemotingCommand
from cluster.remoting.errors import CodecError

FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
LENGTH32 = struct.Struct(">i")  # remark length, extFields length, each value's length
LENGTH16 = struct.Struct(">h")  # each key's length


def _check_range(name: str, value: int, bits: int) -> None:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not low <= value <= high:
        raise CodecError(f"{name} {value} does not fit the binary header's {bits}-bit field")


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    _check_range("code", cmd.code, 16)
    _check_range("version", cmd.version, 16)
    _check_range("opaque", cmd.opaque, 32)
    _check_range("flag", cmd.flag, 32)
    parts = [FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts += [LENGTH32.pack(len(remark)), remark]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        key_bytes, value_bytes = key.encode("utf-8"), value.encode("utf-8")
        if len(key_bytes) > 0x7FFF:
            raise CodecError(f"extFields key of {len(key_bytes)} bytes is too long for the binary header")
        ext += LENGTH16.pack(len(key_bytes)) + key_bytes + LENGTH32.pack(len(value_bytes)) + value_bytes
    parts += [LENGTH32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def unpack(self, layout: struct.Struct) -> tuple:
        if self.pos + layout.size > len(self.data):
            raise CodecError("binary header ends inside a field")
        values = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return values

    def text(self, length: int, what: str) -> str:
        if length < 0 or self.pos + length > len(self.data):
            raise CodecError(f"binary header {what} length {length} overruns the header")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"binary header {what} is not UTF-8") from None


def decode_binary_header(data: bytes) -> RemotingCommand:
    reader = _Reader(data)
    code, language, version, opaque, flag = reader.unpack(FIXED)
    (remark_len,) = reader.unpack(LENGTH32)
    remark = reader.text(remark_len, "remark") if remark_len else None
    (ext_len,) = reader.unpack(LENGTH32)
    if ext_len < 0 or reader.pos + ext_len > len(data):
        raise CodecError(f"binary header extFields length {ext_len} overruns the header")
    end = reader.pos + ext_len
    ext_fields = {}
    while reader.pos < end:
        (key_len,) = reader.unpack(LENGTH16)
        key = reader.text(key_len, "key")
        (value_len,) = reader.unpack(LENGTH32)
        ext_fields[key] = reader.text(value_len, "value")
        if reader.pos > end:
            raise CodecError("binary header extFields entry overruns its length")
    try:
        language_code = LanguageCode(language)
    except ValueError:
        language_code = LanguageCode.OTHER
    return RemotingCommand(code=code, opaque=opaque, flag=flag, language=language_code, version=version,
                           remark=remark, ext_fields=ext_fields, serialize_type=SerializeType.ROCKETMQ)
