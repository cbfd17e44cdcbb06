"""A lenient reader for the JSON that fastjson writes in remoting bodies.

fastjson writes map keys that are not strings bare: numbers (`{"brokerAddrs":{0:"127.0.0.1:10911"}}`)
and whole objects (`{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{...}}` in ConsumeStats).
`json.loads` rejects both. Shape of the result:

* standard JSON reads as `json.loads` reads it;
* a bare numeric key reads as an int (or float);
* an object key reads as an `ObjectKey`: a hashable, sorted tuple of (name, value) pairs, nested
  objects inside it again `ObjectKey`s and arrays tuples; `.as_dict()` gives the plain dict back;
* unquoted identifier keys and single-quoted strings (fastjson's own lenient input) are accepted.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring

import orjson

MAX_DEPTH = 200

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_WHITESPACE = re.compile(r"[ \t\r\n]*")
_LITERALS = {"true": True, "false": False, "null": None}


class FastjsonError(ValueError):
    """Text that even the lenient reader cannot read."""


class ObjectKey(tuple):
    """A JSON object used as a map key, frozen: sorted (name, value) pairs."""

    __slots__ = ()

    @classmethod
    def of(cls, obj: dict) -> ObjectKey:
        return cls(sorted((str(name), _freeze(value)) for name, value in obj.items()))

    def as_dict(self) -> dict:
        return {name: _thaw(value) for name, value in self}

    def get(self, name: str, default=None):
        for key, value in self:
            if key == name:
                return value
        return default


def _freeze(value):
    if isinstance(value, dict):
        return ObjectKey.of(value)
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value):
    if isinstance(value, ObjectKey):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def loads_fastjson(data: bytes | str):
    """Parse fastjson output; standard JSON takes orjson's fast path."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonError(f"not UTF-8: {exc}") from None
    parser = _Parser(data)
    value = parser.value(0)
    parser.skip_ws()
    if parser.pos != len(data):
        raise parser.error("unexpected text after the value")
    return value


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, message: str) -> FastjsonError:
        return FastjsonError(f"{message} at character {self.pos}")

    def skip_ws(self) -> None:
        self.pos = _WHITESPACE.match(self.text, self.pos).end()

    def peek(self) -> str:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise self.error("unexpected end of text")
        return self.text[self.pos]

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            raise self.error("nesting too deep")
        char = self.peek()
        if char == "{":
            return self.object(depth)
        if char == "[":
            return self.array(depth)
        if char in "\"'":
            return self.string()
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            token = number.group()
            return int(token) if token.lstrip("-").isdigit() else float(token)
        word = _IDENTIFIER.match(self.text, self.pos)
        if word and word.group() in _LITERALS:
            self.pos = word.end()
            return _LITERALS[word.group()]
        raise self.error("no JSON value")

    def string(self) -> str:
        quote = self.text[self.pos]
        if quote == '"':
            try:
                value, self.pos = scanstring(self.text, self.pos + 1)
            except json.JSONDecodeError as exc:
                raise self.error(f"bad string: {exc.msg}") from None
            return value
        end = self.pos + 1
        while end < len(self.text) and self.text[end] != "'":
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise self.error("unterminated string")
        inner = self.text[self.pos + 1 : end].replace("\\'", "'")
        inner = re.sub(r'(?<!\\)((?:\\\\)*)"', r'\1\\"', inner)
        self.pos = end + 1
        try:
            return scanstring('"' + inner + '"', 1)[0]
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string: {exc.msg}") from None

    def key(self, depth: int):
        char = self.peek()
        if char in "{[":
            return _freeze(self.value(depth + 1))
        word = _IDENTIFIER.match(self.text, self.pos)
        if word and word.group() not in _LITERALS:
            self.pos = word.end()
            return word.group()
        return self.value(depth + 1)

    def _entries(self, close: str):
        """Step through a container's entries; the caller reads one entry per step."""
        self.pos += 1
        while True:
            char = self.peek()
            if char == close:
                self.pos += 1
                return
            if char == ",":
                self.pos += 1
                continue
            yield
            if self.peek() not in "," + close:
                raise self.error(f"expected ',' or '{close}'")

    def object(self, depth: int) -> dict:
        out: dict = {}
        for _ in self._entries("}"):
            key = self.key(depth)
            if self.peek() != ":":
                raise self.error("expected ':' after a key")
            self.pos += 1
            out[key] = self.value(depth + 1)
        return out

    def array(self, depth: int) -> list:
        return [self.value(depth + 1) for _ in self._entries("]")]
