"""Which request body limit a route has: routes that carry message bodies take large ones."""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.types import Scope

from app.config import Settings

MESSAGE_BODY_ROUTES = re.compile(
    r"/api/topics/[^/]+/messages|/api/messages/[^/]+/resend|/api/dlq/[^/]+/resend|/dead-letters/resend")


def body_limit(settings: Settings) -> Callable[[Scope], int]:
    large, small = settings.max_request_bytes, settings.max_small_request_bytes

    def limit_for(scope: Scope) -> int:
        if scope.get("method") == "POST" and MESSAGE_BODY_ROUTES.fullmatch(scope.get("path", "")):
            return large
        return small

    return limit_for
