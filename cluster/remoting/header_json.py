"""The command header in fastjson's JSON form (serialize type JSON, RocketMQ's default).

Written the way fastjson writes a RemotingCommand: keys sorted, null fields left out, the language
by name. Read leniently: unknown fields are ignored, an unknown language name reads as OTHER.
"""

from __future__ import annotations

import orjson

from cluster.remoting.codes import LanguageCode, SerializeType
from cluster.remoting.command import RemotingCommand
from cluster.remoting.errors import CodecError
from cluster.remoting.fastjson import FastjsonError, loads_fastjson

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, object] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": LanguageCode(cmd.language).name,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": SerializeType.JSON.name,
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


def _int_field(header: dict, name: str, default: int = 0) -> int:
    value = header.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32_MIN <= value <= _INT32_MAX:
        raise CodecError(f"JSON header field {name!r} is not a 32-bit integer: {value!r}")
    return value


def decode_json_header(data: bytes) -> RemotingCommand:
    try:
        header = loads_fastjson(data)
    except FastjsonError as exc:
        raise CodecError(f"JSON header unreadable: {exc}") from None
    if not isinstance(header, dict):
        raise CodecError("JSON header is not an object")
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise CodecError("JSON header field 'remark' is not a string")
    ext = header.get("extFields") or {}
    if not isinstance(ext, dict):
        raise CodecError("JSON header field 'extFields' is not an object")
    ext_fields = {}
    for key, value in ext.items():
        if value is None:
            continue
        if not isinstance(key, str) or not isinstance(value, str | int | float | bool):
            raise CodecError(f"JSON header extFields entry {key!r} is not a string pair")
        ext_fields[key] = value if isinstance(value, str) else orjson.dumps(value).decode()
    language_name = header.get("language", "JAVA")
    language = LanguageCode.__members__.get(language_name, LanguageCode.OTHER) \
        if isinstance(language_name, str) else LanguageCode.OTHER
    return RemotingCommand(
        code=_int_field(header, "code"),
        opaque=_int_field(header, "opaque"),
        flag=_int_field(header, "flag"),
        language=language,
        version=_int_field(header, "version"),
        remark=remark,
        ext_fields=ext_fields,
        serialize_type=SerializeType.JSON,
    )
