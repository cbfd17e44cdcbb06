"""What a content search looks for, and the match of one record the compiled scan left to Python
(a regular expression, or a compressed body) or reported (a literal text)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from store.format.codec import COMPRESSED_FLAG
from store.format.properties import parse_properties
from store.search.scan import KIND_BODY, KIND_CANDIDATE, KIND_PROPERTY, WHERE_BODY, WHERE_PROPERTIES, Hit

SNIPPET_CHARS = 60  # of context each side of a match


@dataclass(frozen=True)
class ContentQuery:
    text: str  # a literal, or a regular expression when `regex`
    regex: bool = False
    in_body: bool = True
    in_properties: bool = True
    topics: tuple[str, ...] = ()  # empty: every topic
    begin_ms: int = 0
    end_ms: int = 2**63 - 1

    @property
    def where(self) -> int:
        return (WHERE_BODY if self.in_body else 0) | (WHERE_PROPERTIES if self.in_properties else 0)

    @property
    def needle(self) -> bytes | None:
        return None if self.regex else self.text.encode("utf-8")


@dataclass(frozen=True)
class Match:
    where: str  # "body" or "property"
    property_name: str | None
    snippet: str  # the text around the match
    snippet_at: int  # where the match starts in the snippet
    match_len: int


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace")


def _snippet(text: str, start: int, length: int) -> tuple[str, int]:
    first = max(0, start - SNIPPET_CHARS)
    return text[first : start + length + SNIPPET_CHARS], start - first


class Matcher:
    def __init__(self, query: ContentQuery):
        self.query = query
        self.pattern = re.compile(query.text) if query.regex else None

    def _find(self, text: str) -> tuple[int, int] | None:
        if self.pattern is not None:
            found = self.pattern.search(text)
            return (found.start(), found.end() - found.start()) if found else None
        at = text.find(self.query.text)
        return (at, len(self.query.text)) if at >= 0 else None

    def match(self, record, hit: Hit) -> Match | None:
        """The match in the record `record` (its bytes, from the hit's position) as the hit says."""
        _, kind, _, body_at, body_len, props_at, props_len, sys_flag = hit
        body = props = None
        if kind in (KIND_CANDIDATE, KIND_BODY):
            body = bytes(record[body_at : body_at + body_len])
            if sys_flag & COMPRESSED_FLAG:
                try:
                    body = zlib.decompress(body)
                except zlib.error:
                    body = b""
        if kind in (KIND_CANDIDATE, KIND_PROPERTY):
            props = parse_properties(_text(bytes(record[props_at : props_at + props_len])))
        return self._first_match(body, props)

    def match_message(self, body: bytes, properties: dict[str, str]) -> Match | None:
        """The match in a record the Python decoder read (its body inflated)."""
        return self._first_match(body, properties)

    def _first_match(self, body: bytes | None, properties: dict[str, str] | None) -> Match | None:
        if body is not None and self.query.in_body:
            text = _text(body)
            found = self._find(text)
            if found is not None:
                snippet, at = _snippet(text, *found)
                return Match("body", None, snippet, at, found[1])
        if properties is not None and self.query.in_properties:
            for name, value in properties.items():
                found = self._find(value)
                if found is not None:
                    snippet, at = _snippet(value, *found)
                    return Match("property", name, snippet, at, found[1])
        return None
