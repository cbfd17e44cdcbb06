"""GET /docs: the OpenAPI reference in Swagger UI, served from this server (no CDN, so it works
on a machine without internet access)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from app.render import STATIC_PREFIX

SWAGGER_JS = f"{STATIC_PREFIX}/vendor/swagger-ui-5.32.0-bundle.js"
SWAGGER_CSS = f"{STATIC_PREFIX}/vendor/swagger-ui-5.32.0.css"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=request.app.openapi_url, title=f"{request.app.title} REST API",
                               swagger_js_url=SWAGGER_JS, swagger_css_url=SWAGGER_CSS,
                               swagger_favicon_url=f"{STATIC_PREFIX}/favicon.svg")
