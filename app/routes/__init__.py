"""HTTP routes: parse the request, call one service, shape the response."""

from __future__ import annotations

from typing import Any

from app.schemas import ErrorResponse


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries of the error statuses a route can answer with (all share one body); every
    route behind an account check can also answer 401 (no or bad credentials) and 403 (a role
    without the permission, or a request from another origin)."""
    return {status: {"model": ErrorResponse} for status in sorted({401, 403, *statuses})}


def link(path: str, method: str, *, parameters: dict[str, str] | None = None,
         request_body: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAPI link to the operation at `path`: what of this answer (runtime expressions such as
    $response.body#/results/0/offset_msg_id) goes into its parameters or body."""
    found: dict[str, Any] = {"operationRef": "#/paths/" + path.replace("~", "~0").replace("/", "~1") + f"/{method}"}
    if parameters:
        found["parameters"] = parameters
    if request_body is not None:
        found["requestBody"] = request_body
    return found


def with_links(responses: dict[int | str, dict[str, Any]], status: int, **links: dict[str, Any]
               ) -> dict[int | str, dict[str, Any]]:
    """`responses` with `links` on the answer of `status`."""
    return {**responses, status: {**responses.get(status, {}), "links": links}}
