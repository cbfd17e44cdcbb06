"""Errors the services raise on purpose; app.errors maps each to an HTTP status."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the services' own errors."""


class InvalidRequestError(ServiceError, ValueError):
    """The request breaks a rule (bad base64, conflicting fields, too many messages...)."""


class PayloadTooLargeError(ServiceError):
    """The request carries more than a limit allows (the bodies of a produce batch together...)."""


class ForbiddenError(ServiceError):
    """The request is well formed but not allowed (a producer sending to a system topic...)."""


class NotFoundError(ServiceError):
    """The thing asked for does not exist."""


class ConflictError(ServiceError):
    """The request conflicts with the current state (an idempotency key reused for another request...)."""


class NotOnThisBackendError(ConflictError):
    """The console's backend does not serve this (the embedded store's files on a live cluster, say)."""


class AuthenticationError(ServiceError):
    """Nobody known makes the request: no credentials, a bad token, an ended session."""
