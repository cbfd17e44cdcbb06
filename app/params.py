"""The rules of names, ids and keys, declared once so that the OpenAPI document says what the
server takes: types for path and query parameters and for the strings of request bodies.

Each rule is the store's or a service's own (named beside it), read from their constants where
they have them. A pattern is declared with `pattern`, `min_length` and `max_length`, so pydantic
checks it before any service sees the value and a client reading the document is told the same
rule. A value that breaks a rule is refused as the store's own check refuses it: 400, saying what
the name or id looks like (a value of the wrong type stays a 422). Values are taken exactly as
given: nothing is stripped, so an id with a space around it is refused, never trimmed.

The store's name patterns end in `$`, which Python also matches before a final newline; pydantic
and JSON Schema do not, so a name ending in a newline is refused here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import HTTPException, Path, Query
from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from app.services import accounts, client_credentials
from app.services.lookup import MAX_KEY_CHARS
from app.services.messages import RESERVED_PROPERTIES
from app.services.resend import EDITABLE_PREFIXES_REFUSED
from app.services.timeline import MESSAGE_ID
from store.broker.metadata import GROUP_NAME, MAX_GROUP_BYTES
from store.format import delay_levels, topics

__all__ = [
    "ACCOUNT_NAME_PATTERN", "BASE64_PATTERN", "DELAY_LEVELS_PATTERN", "KEY_PATTERN", "MAX_CONSUMER_GROUP_CHARS",
    "MAX_DEAD_LETTER_REF_CHARS", "MIN_PASSWORD_CHARS", "OFFSET_MSG_ID_PATTERN", "AccessKeyPath", "ConsumerGroupPath",
    "DeadLetterRef",
    "EditPropertyName", "EditPropertyValue", "GroupField", "GroupPath", "GroupQuery", "KeyQuery", "MessageIdPath",
    "MessageKey", "MessageTag", "OffsetMsgIdPath", "PropertyName", "PropertyValue", "SearchQuery", "TopicField",
    "TopicPath", "TopicQuery", "UniqueKeyPath", "exactly_one_of", "names_declared", "not_both",
]

# Errors of the declared constraints; any other (a number where a string belongs) stays a 422.
_RULE_ERRORS = frozenset({"string_pattern_mismatch", "string_too_short", "string_too_long"})


def _shown(value: str) -> str:
    return repr(value[:64]) + ("..." if len(value) > 64 else "")


def _refused(message: Callable[[str], str]) -> WrapValidator:
    """Answers a value that breaks the declared rule with 400 and `message(value)`."""

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            if isinstance(value, str) and all(error["type"] in _RULE_ERRORS for error in exc.errors()):
                # Not a ValueError, so pydantic lets it through to app.errors, which answers 400.
                raise HTTPException(400, message(value)) from None
            raise

    return WrapValidator(check)


# -- topics and groups (store/format/topics.py, store/broker/metadata.py) -------------------------
# The name characters are ASCII, so the store's byte limits are character limits.
_NAME_CHARS = "letters, digits, '%', '|', '_' or '-'"
_TOPIC = {"pattern": topics.TOPIC_NAME.pattern, "min_length": 1, "max_length": topics.MAX_TOPIC_BYTES}
_TOPIC_HELP = f"A topic name: 1 to {topics.MAX_TOPIC_BYTES} {_NAME_CHARS}."
_TOPIC_REFUSED = _refused(lambda v: f"invalid topic {_shown(v)}: a topic name is 1 to {topics.MAX_TOPIC_BYTES} "
                                    f"{_NAME_CHARS}")

_GROUP = {"pattern": GROUP_NAME.pattern, "min_length": 1, "max_length": MAX_GROUP_BYTES}
_GROUP_HELP = f"A consumer group name: 1 to {MAX_GROUP_BYTES} {_NAME_CHARS}."
_GROUP_REFUSED = _refused(lambda v: f"invalid group name {_shown(v)}: a group name is 1 to {MAX_GROUP_BYTES} "
                                    f"{_NAME_CHARS}")

# A group that consumes has a retry topic %RETRY%<group> and a dead-letter topic %DLQ%<group>,
# topics like any other: its name leaves room for the longer prefix within the topic limit.
MAX_CONSUMER_GROUP_CHARS = topics.MAX_TOPIC_BYTES - len(topics.RETRY_PREFIX)
_CONSUMER_GROUP = {**_GROUP, "max_length": MAX_CONSUMER_GROUP_CHARS}
_CONSUMER_GROUP_HELP = (f"A consumer group name: 1 to {MAX_CONSUMER_GROUP_CHARS} {_NAME_CHARS} (its retry topic "
                        f"{topics.RETRY_PREFIX}<group> must fit the {topics.MAX_TOPIC_BYTES}-character topic limit).")
_CONSUMER_GROUP_REFUSED = _refused(
    lambda v: f"invalid group name {_shown(v)}: a consumer group name is 1 to {MAX_CONSUMER_GROUP_CHARS} "
              f"{_NAME_CHARS}, so that its retry topic {topics.RETRY_PREFIX}<group> fits the "
              f"{topics.MAX_TOPIC_BYTES}-character topic limit")

TopicPath = Annotated[str, Path(description=_TOPIC_HELP, **_TOPIC), _TOPIC_REFUSED]
TopicQuery = Annotated[str | None, Query(description=_TOPIC_HELP + " Look in this topic only; default: every "
                                         "topic, retry, schedule and dead-letter topics included.", **_TOPIC),
                       _TOPIC_REFUSED]
TopicField = Annotated[str, Field(description=_TOPIC_HELP, **_TOPIC), _TOPIC_REFUSED]
GroupPath = Annotated[str, Path(description=_GROUP_HELP, **_GROUP), _GROUP_REFUSED]
GroupQuery = Annotated[str | None, Query(**_GROUP), _GROUP_REFUSED]
GroupField = Annotated[str, Field(description=_GROUP_HELP, **_GROUP), _GROUP_REFUSED]
ConsumerGroupPath = Annotated[str, Path(description=_CONSUMER_GROUP_HELP, **_CONSUMER_GROUP), _CONSUMER_GROUP_REFUSED]

# -- message ids (store/format/ids.py, app/services/lookup.py, app/services/timeline.py) ----------
_HEX = "0-9A-Fa-f"
OFFSET_MSG_ID_PATTERN = f"^(?:[{_HEX}]{{32}}|[{_HEX}]{{56}})$"  # ids.decode_offset_msg_id: IPv4 or IPv6 store host
OffsetMsgIdPath = Annotated[str, Path(
    pattern=OFFSET_MSG_ID_PATTERN, min_length=32, max_length=56,
    description="An offset message id: 32 hex characters (56 for a store on IPv6), exactly as given."),
    _refused(lambda v: f"malformed offset message id {_shown(v)}: an offset message id is 32 or 56 hex characters "
                       "(0-9, A-F), taken exactly as given")]

# The timeline takes a unique key or an offset id: RocketMQ 4 clients' unique keys are 32 or 56
# hex characters, RocketMQ 5 clients' message ids 34.
MessageIdPath = Annotated[str, Path(
    pattern=MESSAGE_ID.pattern, min_length=16, max_length=128,
    description="A unique key or the offset message id of any copy: 16 to 128 hex characters, exactly as given."),
    _refused(lambda v: f"malformed message id {_shown(v)}: a unique key or an offset message id is 16 to 128 hex "
                       "characters, taken exactly as given")]

# -- keys (store/broker/record_builder.py, app/services/lookup.py) --------------------------------
# A message's KEYS property holds its keys joined by spaces: a key has no space, and, as every
# property, no \x01 or \x02 (the property separators).
KEY_PATTERN = r"^[^ \x01\x02]+$"
_KEY_LOOKUP = {"pattern": "^[^ ]+$", "min_length": 1, "max_length": MAX_KEY_CHARS}  # lookup._check_key
_KEY_LOOKUP_REFUSED = _refused(lambda v: f"invalid key {_shown(v)}: a key is 1 to {MAX_KEY_CHARS} characters "
                                         "without spaces")
KeyQuery = Annotated[str, Query(description=f"A business key (KEYS): 1 to {MAX_KEY_CHARS} characters without "
                                "spaces.", **_KEY_LOOKUP), _KEY_LOOKUP_REFUSED]
UniqueKeyPath = Annotated[str, Path(
    description=f"A unique key (UNIQ_KEY, the message id clients see; 32 hex characters from a RocketMQ 4 client on "
                f"IPv4): 1 to {MAX_KEY_CHARS} characters without spaces, exactly as given.", **_KEY_LOOKUP),
    _refused(lambda v: f"invalid unique key {_shown(v)}: a key is 1 to {MAX_KEY_CHARS} characters without spaces")]
MessageKey = Annotated[str, Field(pattern=KEY_PATTERN, min_length=1, description="A business key: no spaces."),
                       _refused(lambda v: f"invalid key {_shown(v)}: keys are non-empty and have no spaces (nor the "
                                          "property separators \\x01 and \\x02)")]

# Whitespace str.strip() takes away: Unicode's (\s) and the four separators \x1c-\x1f.
_NOT_STRIPPED = r"[^\s\x1c-\x1f]"


def _exact_token(max_chars: int) -> str:
    """1 to `max_chars` characters without spaces, none that strip() removes at either end."""
    return f"^{_NOT_STRIPPED}(?:[^ ]{{0,{max_chars - 2}}}{_NOT_STRIPPED})?$"


# The search box recognises topic:queue:offset, an offset message id or a unique key, else
# looks the text up as a key (lookup.search): so a query is a key's length, without spaces.
SearchQuery = Annotated[str, Query(
    pattern=_exact_token(MAX_KEY_CHARS), min_length=1, max_length=MAX_KEY_CHARS,
    description="An offset message id, a unique key, a key, or topic:queue:offset: 1 to "
                f"{MAX_KEY_CHARS} characters without spaces, exactly as given."),
    _refused(lambda v: f"invalid query {_shown(v)}: type an offset message id, a unique key, a key or "
                       f"topic:queue:offset (1 to {MAX_KEY_CHARS} characters without spaces, exactly as given)")]

# A dead letter of a group, by offset message id or unique key (resend.find_dead_letter).
MAX_DEAD_LETTER_REF_CHARS = 255
DeadLetterRef = Annotated[str, Field(
    pattern=_exact_token(MAX_DEAD_LETTER_REF_CHARS), min_length=1, max_length=MAX_DEAD_LETTER_REF_CHARS,
    description="An offset message id (32 or 56 hex characters) or a unique key: 1 to 255 characters without "
                "spaces, exactly as given."),
    _refused(lambda v: f"malformed id {_shown(v)}: name a dead letter by its offset message id (32 or 56 hex "
                       f"characters) or its unique key (1 to {MAX_DEAD_LETTER_REF_CHARS} characters without "
                       "spaces), exactly as given")]

# -- tags and properties (store/format/properties.py, app/services/messages.py) -------------------
MessageTag = Annotated[str, Field(pattern=r"^[^\x01\x02]*$"),
                       _refused(lambda v: f"invalid tag {_shown(v)}: a tag has no \\x01 or \\x02 characters (the "
                                          "property separators)")]
_PROPERTY = {"pattern": r"^[^\x01\x02]+$", "min_length": 1}
_PROPERTY_REFUSED = _refused(lambda v: f"invalid property {_shown(v)}: property names and values are not empty and "
                                       "have no \\x01 or \\x02 characters (the property separators)")
PropertyName = Annotated[str, Field(**_PROPERTY, json_schema_extra={"not": {"enum": sorted(RESERVED_PROPERTIES)}}),
                         _PROPERTY_REFUSED]
PropertyValue = Annotated[str, Field(**_PROPERTY), _PROPERTY_REFUSED]

# An operator's edit before a resend (resend.edit_diff): no line breaks either, and only the
# properties the broker neither sets nor reads.
_EDIT_PROPERTY = r"^[^\x01\x02\n\r]+$"
_EDIT_REFUSED = _refused(lambda v: f"property {_shown(v)} cannot be set here: a name is not empty, and names and "
                                   "values have no \\x01, \\x02, \\r or \\n characters")
_NOT_EDITABLE = {"anyOf": [
    {"enum": sorted({*RESERVED_PROPERTIES, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID})},
    {"pattern": "^(?:" + "|".join(EDITABLE_PREFIXES_REFUSED) + ")"}]}
EditPropertyName = Annotated[str, Field(pattern=_EDIT_PROPERTY, min_length=1, max_length=127,
                                        json_schema_extra={"not": _NOT_EDITABLE}), _EDIT_REFUSED]
EditPropertyValue = Annotated[str, Field(pattern=r"^[^\x01\x02\n\r]*$", max_length=32_767), _EDIT_REFUSED]


def names_declared(schema: dict[str, Any]) -> None:
    """A map's key rule as `propertyNames` (pydantic writes `patternProperties`, which lets a key
    outside the pattern through unchecked): every key must follow it."""
    pattern_properties = schema.pop("patternProperties", None)
    if not pattern_properties:
        return
    [(pattern, values)] = pattern_properties.items()
    names = schema.setdefault("propertyNames", {})
    names["pattern"] = pattern
    names.setdefault("minLength", 1)
    schema["additionalProperties"] = values


# -- client credentials (app/services/client_credentials.py) --------------------------------------
_ACCESS_KEY = {"pattern": client_credentials.ACCESS_KEY_PATTERN, "min_length": 1, "max_length": 64}
AccessKeyPath = Annotated[str, Path(description="A client credential's access key (AK...).", **_ACCESS_KEY),
                          _refused(lambda v: f"invalid access key {_shown(v)}: an access key is 1 to 64 letters, "
                                             "digits, '.', '_' or '-'")]


# -- declared only: rules a service checks itself, with its own 400 ------------------------------
# The value is not checked again here; the document says the rule so that clients keep to it.
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"  # b64decode(validate=True)
ACCOUNT_NAME_PATTERN = f"^{accounts.NAME_PATTERN.pattern}$"  # accounts.checked_name
MIN_PASSWORD_CHARS = accounts.MIN_PASSWORD


def _delay_levels_pattern() -> str:
    """A delay level table delay_levels.parse_delay_levels takes: positive numbers with a unit, one
    space apart, at most MAX_LEVELS of them. Each level is at most MAX_DELAY_MS: declared as one
    digit fewer than the largest number of each unit has (so a little under the limit)."""
    levels = []
    for unit, unit_ms in delay_levels.UNIT_MS.items():
        digits = len(str(delay_levels.MAX_DELAY_MS // unit_ms)) - 1
        levels.append(f"[1-9][0-9]{{0,{digits - 1}}}{unit}")
    level = "0*(?:" + "|".join(levels) + ")"
    return f"^{level}(?: {level}){{0,{delay_levels.MAX_LEVELS - 1}}}$"


DELAY_LEVELS_PATTERN = _delay_levels_pattern()


def exactly_one_of(*names: str, types: tuple[str, ...]) -> dict[str, Any]:
    """JSON Schema for an object where exactly one of these fields is set (not null)."""
    return {"oneOf": [{"properties": {name: {"type": kind}}, "required": [name]}
                      for name, kind in zip(names, types, strict=True)]}


def not_both(first: str, second: str, types: tuple[str, str]) -> dict[str, Any]:
    """JSON Schema for an object where these two fields are not both set (not null)."""
    return {"not": {"properties": {first: {"type": types[0]}, second: {"type": types[1]}},
                    "required": [first, second]}}
BrokerName = Annotated[str, Path(description="A broker's name, as the Cluster page lists it.", min_length=1,
                                 max_length=255, pattern=r"^[%|a-zA-Z0-9_.-]+$")]
BrokerId = Annotated[int, Path(description="0: the master; a slave's id otherwise.", ge=0, le=1024)]
