"""The console's HTML pages. Each route builds one data dictionary and hands it to
`Renderer.page`, which answers the page, its JSON twin or a named fragment from it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.render import Renderer


async def get_renderer(request: Request) -> Renderer:
    return request.app.state.renderer


RendererDep = Annotated[Renderer, Depends(get_renderer)]
