"""Frames and both header encodings: round trips, RocketMQ's layout, hostile bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.remoting.codes import LanguageCode, SerializeType
from cluster.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand, request
from cluster.remoting.errors import CodecError, FrameTooLarge
from cluster.remoting.frame import decode_frame, encode_frame, frame_length
from cluster.remoting.header_binary import decode_binary_header, encode_binary_header
from cluster.remoting.header_json import decode_json_header, encode_json_header

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def commands(serialize_type: SerializeType):
    return st.builds(
        RemotingCommand,
        code=int16, opaque=int32, flag=int32, version=int16,
        language=st.sampled_from(LanguageCode),
        remark=st.none() | text.filter(bool),
        ext_fields=st.dictionaries(text, text, max_size=8),
        body=st.binary(max_size=200),
        serialize_type=st.just(serialize_type),
    )


@given(commands(SerializeType.JSON))
def test_json_frames_round_trip(cmd):
    assert decode_frame(encode_frame(cmd)) == cmd


@given(commands(SerializeType.ROCKETMQ))
def test_binary_frames_round_trip(cmd):
    assert decode_frame(encode_frame(cmd)) == cmd


@given(commands(SerializeType.ROCKETMQ))
def test_binary_header_survives_trailing_bytes_and_json_agrees(cmd):
    cmd.body = b""
    assert decode_binary_header(encode_binary_header(cmd) + b"\x00\x01") == cmd
    cmd.serialize_type = SerializeType.JSON
    assert decode_json_header(encode_json_header(cmd)) == cmd


def test_binary_header_layout_is_rocketmqs():
    cmd = RemotingCommand(code=105, opaque=7, flag=RESPONSE_FLAG, language=LanguageCode.JAVA, version=409,
                          remark="ok", ext_fields={"topic": "T"}, serialize_type=SerializeType.ROCKETMQ)
    header = encode_binary_header(cmd)
    ext = struct.pack(">h", 5) + b"topic" + struct.pack(">i", 1) + b"T"
    assert header == (struct.pack(">hbhii", 105, 0, 409, 7, 1) + struct.pack(">i", 2) + b"ok"
                      + struct.pack(">i", len(ext)) + ext)
    frame = encode_frame(cmd)
    length, word = struct.unpack_from(">iI", frame)
    assert length == len(frame) - 4 and word >> 24 == 1 and word & 0xFFFFFF == len(header)


def test_json_header_is_fastjsons_form():
    cmd = request(106, {"topic": "T", "flagged": True, "absent": None})
    assert encode_json_header(cmd) == (
        b'{"code":106,"extFields":{"flagged":"true","topic":"T"},"flag":0,"language":"PYTHON",'
        b'"opaque":0,"serializeTypeCurrentRPC":"JSON","version":409}')


def test_json_header_reads_leniently():
    cmd = decode_json_header(b'{"code":0,"flag":1,"language":"KOTLIN","opaque":3,"version":409,"extra":[1],'
                             b'"extFields":{"a":"1","b":null,"c":5}}')
    assert cmd.language == LanguageCode.OTHER and cmd.ext_fields == {"a": "1", "c": "5"} and cmd.is_response


def test_flags():
    assert RemotingCommand(code=1, flag=RESPONSE_FLAG | ONEWAY_FLAG).is_oneway
    assert not RemotingCommand(code=1).is_response


@pytest.mark.parametrize("bad", [
    b"",  # no length prefix
    struct.pack(">i", 2) + b"ab",  # shorter than the header word
    struct.pack(">iI", 4, 7),  # header length 7 in a frame with no header bytes
    struct.pack(">iI", 9, (5 << 24) | 5) + b"{}{}{",  # unknown serialize type
    struct.pack(">iI", 6, 2) + b"[]",  # a JSON header that is not an object
    struct.pack(">iI", 6, 2) + b"{x",  # unreadable JSON
    struct.pack(">iI", 14, 10) + b'{"code":1}x',  # one byte more than announced
    struct.pack(">iI", 17, (1 << 24) | 13) + struct.pack(">hbhii", 1, 0, 0, 0, 0),  # binary header cut short
    struct.pack(">iI", 25, (1 << 24) | 21) + struct.pack(">hbhiii", 1, 0, 0, 0, 0, 9999) + b"\0" * 4,  # remark overruns
    struct.pack(">iI", 25, (1 << 24) | 21) + struct.pack(">hbhiiii", 1, 0, 0, 0, 0, 0, 50),  # extFields overrun
    struct.pack(">iI", 27, (1 << 24) | 23) + struct.pack(">hbhiiii", 1, 0, 0, 0, 0, 0, 2) + struct.pack(">h", -1),
    struct.pack(">iI", 19, 15) + b'{"code":"many"}',  # a field of the wrong type
    struct.pack(">iI", 27, (1 << 24) | 23) + struct.pack(">hbhiiii", 1, 0, 0, 0, 0, 2, 0)[:-4] + b"\xff\xfe"
    + struct.pack(">i", 0),  # remark not UTF-8
])
def test_hostile_frames_raise_codec_errors(bad):
    with pytest.raises(CodecError):
        decode_frame(bad)


def test_oversized_frames_are_refused_from_their_prefix():
    with pytest.raises(FrameTooLarge) as refused:
        frame_length(struct.pack(">i", 1 << 30), max_frame_bytes=1 << 20)
    assert refused.value.length == 1 << 30
    with pytest.raises(CodecError):
        frame_length(struct.pack(">i", -5))


def test_values_the_binary_header_cannot_hold_are_refused():
    with pytest.raises(CodecError):
        encode_binary_header(RemotingCommand(code=40000, serialize_type=SerializeType.ROCKETMQ))
    with pytest.raises(CodecError):
        encode_binary_header(RemotingCommand(code=1, ext_fields={"k" * 40000: "v"}))
