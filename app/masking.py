"""Message bodies in answers: one rule for who sees them, applied where data leaves.

Whatever carries a message's body or anything made from it (its text, base64, hex, a preview,
an edit's diff) travels wrapped in `Body`, owned by the message it belongs to. Only `unmask`
opens the wrappers, at the edge (the renderer for pages, JSON twins and fragments; the API
routes and exports): the content for a message the caller may see (by role, or by a recent
audited reveal: app.services.reveal), the masked stand-in otherwise. A wrapper that reaches an
encoder unopened gives nothing away: it is not JSON, and as text it is a placeholder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.roles import Principal
from app.services import reveal
from store.clock import Clock

PLACEHOLDER = "(masked)"


class Body:
    """Body content of message `owner` (its offset message id; None: of no message a reveal
    names) and what the answer holds instead when the caller may not see it."""

    __slots__ = ("owner", "content", "masked")

    def __init__(self, owner: str | None, content: Any, masked: Any = None):
        self.owner, self.content, self.masked = owner, content, masked

    def __str__(self) -> str:
        return PLACEHOLDER

    __repr__ = __str__


# Of the messages named, those whose bodies the caller sees.
Shown = Callable[[set[str]], set[str]]


def _bodies(data: Any) -> Iterator[Body]:
    if isinstance(data, Body):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from _bodies(value)
    elif isinstance(data, list | tuple):
        for value in data:
            yield from _bodies(value)


def _opened(data: Any, shown: set[str]) -> Any:
    if isinstance(data, Body):
        return data.content if data.owner is not None and data.owner in shown else data.masked
    if isinstance(data, dict):
        return {key: _opened(value, shown) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_opened(value, shown) for value in data]
    return data


def unmask(data: Any, shown: Shown) -> Any:
    """`data` with every Body opened: its content when `shown` names its owner, else its stand-in."""
    bodies = list(_bodies(data))
    if not bodies:
        return data
    owners = {body.owner for body in bodies if body.owner is not None}
    return _opened(data, shown(owners) if owners else set())


def show_all(data: Any) -> Any:
    """Every body shown: for a message delivered to its consumer, or the command line on the store's own files."""
    return _opened(data, {body.owner for body in _bodies(data) if body.owner is not None})


class BodyMask:
    """The rule for one caller: every body for a role that reads bodies, else those it revealed lately."""

    def __init__(self, sessions: sessionmaker[Session], clock: Clock, principal: Principal | None):
        self.sessions, self.clock, self.principal = sessions, clock, principal

    def shown(self, owners: set[str]) -> set[str]:
        if self.principal is None:
            return set()
        return reveal.revealed(self.sessions, self.clock, self.principal, owners)

    def __call__(self, data: Any) -> Any:
        """`data` as it may leave to this caller."""
        return unmask(data, self.shown)

    def shows(self, owner: str) -> bool:
        return owner in self.shown({owner})
