"""Framing: one command on the wire.

    int32 length (of everything after it) | int32 (serialize type << 24 | header length) | header | body

Big-endian. The header is JSON or RocketMQ's binary form, as the type byte says.
"""

from __future__ import annotations

import struct

from cluster.remoting.codes import SerializeType
from cluster.remoting.command import RemotingCommand
from cluster.remoting.errors import CodecError, FrameTooLarge
from cluster.remoting.header_binary import decode_binary_header, encode_binary_header
from cluster.remoting.header_json import decode_json_header, encode_json_header

FRAME_LENGTH = struct.Struct(">i")  # bytes after this field
HEADER_WORD = struct.Struct(">I")  # serialize type in the high byte, header length in the low 24 bits
HEADER_LENGTH_MASK = 0xFFFFFF
# RocketMQ's own bound (com.rocketmq.remoting.frameMaxLength): 16 MiB.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

_ENCODERS = {SerializeType.JSON: encode_json_header, SerializeType.ROCKETMQ: encode_binary_header}
_DECODERS = {SerializeType.JSON: decode_json_header, SerializeType.ROCKETMQ: decode_binary_header}


def encode_frame(cmd: RemotingCommand) -> bytes:
    header = _ENCODERS[SerializeType(cmd.serialize_type)](cmd)
    if len(header) > HEADER_LENGTH_MASK:
        raise CodecError(f"header of {len(header)} bytes does not fit the 24-bit length")
    length = HEADER_WORD.size + len(header) + len(cmd.body)
    if length > 0x7FFFFFFF:
        raise CodecError(f"frame of {length} bytes is too long")
    word = (int(cmd.serialize_type) << 24) | len(header)
    return FRAME_LENGTH.pack(length) + HEADER_WORD.pack(word) + header + cmd.body


def frame_length(prefix: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """The length a frame's 4-byte prefix announces, refused if it is over the bound or too short."""
    (length,) = FRAME_LENGTH.unpack(prefix)
    if length > max_frame_bytes:
        raise FrameTooLarge(length, max_frame_bytes)
    if length < HEADER_WORD.size:
        raise CodecError(f"frame length {length} is shorter than its header word")
    return length


def decode_frame_payload(payload: bytes) -> RemotingCommand:
    """Decode what follows the length prefix (exactly the announced number of bytes)."""
    if len(payload) < HEADER_WORD.size:
        raise CodecError("frame shorter than its header word")
    (word,) = HEADER_WORD.unpack_from(payload)
    header_len = word & HEADER_LENGTH_MASK
    try:
        serialize_type = SerializeType(word >> 24)
    except ValueError:
        raise CodecError(f"unknown serialize type {word >> 24}") from None
    if header_len > len(payload) - HEADER_WORD.size:
        raise CodecError(f"header length {header_len} overruns the frame of {len(payload)} bytes")
    header_end = HEADER_WORD.size + header_len
    cmd = _DECODERS[serialize_type](bytes(payload[HEADER_WORD.size : header_end]))
    cmd.body = bytes(payload[header_end:])
    return cmd


def decode_frame(frame: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> RemotingCommand:
    """Decode one whole frame, length prefix included."""
    if len(frame) < FRAME_LENGTH.size:
        raise CodecError("frame shorter than its length prefix")
    length = frame_length(frame[: FRAME_LENGTH.size], max_frame_bytes)
    if length != len(frame) - FRAME_LENGTH.size:
        raise CodecError(f"frame announces {length} bytes but holds {len(frame) - FRAME_LENGTH.size}")
    return decode_frame_payload(frame[FRAME_LENGTH.size :])
