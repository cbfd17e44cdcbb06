"""Query parameters as people type them into the console's forms: times as epoch milliseconds
or as a date and time (UTC), numbers that may be left empty."""

from __future__ import annotations

import datetime as dt

from app.services.errors import InvalidRequestError


def optional_int(text: str | None, name: str, *, low: int = 0, high: int | None = None) -> int | None:
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidRequestError(f"{name} must be a whole number, not {text[:40]!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f"at least {low}"
        raise InvalidRequestError(f"{name} must be {bound}, not {value}")
    return value


MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last time a date can show


def optional_time_ms(text: str | None, name: str) -> int | None:
    """Epoch milliseconds, or an ISO date and time such as 2026-11-21T08:30 (UTC unless it says)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.isdigit():
        if len(text) > len(str(MAX_EPOCH_MS)) or int(text) > MAX_EPOCH_MS:
            raise InvalidRequestError(f"{name} is after the year 9999: give epoch milliseconds up to {MAX_EPOCH_MS}")
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise InvalidRequestError(f"{name} must be epoch milliseconds or a date and time like "
                                  f"2026-11-21T08:30, not {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return max(0, int(moment.timestamp() * 1000))


def as_form_time(epoch_ms: int | None) -> str:
    """The value a datetime-local input shows for a time (UTC)."""
    if epoch_ms is None or not 0 <= epoch_ms <= MAX_EPOCH_MS:
        return ""
    return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
