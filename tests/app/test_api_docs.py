"""The API's documentation works as written: the OpenAPI document declares the bearer token
(so /docs offers Authorize) on every operation that needs a role, and every curl example of the
docs that calls such a route sends an Authorization header."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.security import required_permission
from tests.app.conftest import make_settings
from tests.app.test_access import api_routes

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from app.main import create_app

    return create_app(make_settings(tmp_path_factory.mktemp("docs") / "data"))


def needs_a_role(route, router_dependencies) -> bool:
    checks = [required_permission(d.call) for d in route.dependant.dependencies]
    checks += [required_permission(d.dependency) for d in router_dependencies]
    return any(checks)


def test_the_openapi_document_declares_the_bearer_token_where_a_role_is_needed(app):
    document = app.openapi()
    schemes = document["components"]["securitySchemes"]
    [(name, scheme)] = [(name, s) for name, s in schemes.items() if s["type"] == "http"]
    assert scheme["scheme"] == "bearer"
    protected = {(method.upper(), route.path) for route, extra in api_routes(app) if route.include_in_schema
                 and needs_a_role(route, extra) for method in route.methods}
    assert len(protected) > 40
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            declared = {"security": operation.get("security", [])}
            if (method.upper(), path) in protected:
                assert {name: []} in declared["security"], f"{method.upper()} {path} does not declare the token"
                assert {"401", "403"} <= set(operation["responses"]), f"{method.upper()} {path}: refusals undocumented"
            else:
                assert declared["security"] == [], f"{method.upper()} {path} needs no credentials"
    assert ("GET", "/api/me") not in protected and ("GET", "/healthz") not in protected


def code_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def curl_examples(text: str) -> list[str]:
    """Every curl command of the text's code blocks, its continued lines joined (after a
    backslash, or inside a quoted argument)."""
    commands = []
    for block in code_blocks(text):
        lines = re.sub(r"\\\n\s*", " ", block).splitlines()
        for n, line in enumerate(lines):
            start = line.find("curl ")
            if start < 0:
                continue
            command = line[start:].split(" # ")[0].split(") |")[0].rstrip(")")
            while not complete(command):
                n += 1
                command += "\n" + lines[n]
            commands.append(command)
    return commands


def complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:  # a quote still open: the command goes on on the next line
        return False
    return True


def method_and_path(command: str) -> tuple[str, str, list[str]]:
    words = shlex.split(command)
    headers = [words[i + 1] for i, word in enumerate(words) if word == "-H"]
    method = words[words.index("-X") + 1] if "-X" in words else "POST" if "-d" in words else "GET"
    [url] = [word for word in words if word.startswith("http")]
    return method, urlsplit(url).path, headers


def test_every_curl_example_that_needs_a_role_sends_a_token(app):
    routes = api_routes(app)
    checked = 0
    for doc in DOCS:
        for command in curl_examples(doc.read_text(encoding="utf-8")):
            method, path, headers = method_and_path(command)
            matched = [(route, extra) for route, extra in routes if method in route.methods
                       and route.path_regex.match(path)]
            assert matched, f"{doc.name}: {method} {path} is no route of the API: {command}"
            if needs_a_role(*matched[0]):
                assert any(re.fullmatch(r"Authorization: Bearer \$\w+", h) for h in headers), \
                    f"{doc.name}: the example sends no token, so it would answer 401: {command}"
            checked += 1
    assert checked > 30
