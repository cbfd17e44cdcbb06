"""The store's packages are layers: a module imports only from its own layer or those below
(errors and clock, then format, log, projections and content search, broker, the engine parts of the facade, the
message_store facade, and the clients built on it)."""

from __future__ import annotations

import ast
from pathlib import Path

import store

RANK = {"errors": 0, "clock": 0, "locks": 0, "format": 1, "log": 2, "projections": 3, "search": 3, "broker": 4,
        "engine": 5, "message_store": 6, "clients": 7}
# Pop receive drives the facade it is given (its lock, appends and trace): named for type hints only.
KNOWN_SEAMS = {"broker/pop imports store.message_store"}
ROOT = Path(store.__file__).parent


def _layer(module: str) -> str:
    return module.split(".")[1]


def _store_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("store."):
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module == "store":
            found.extend(f"store.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.startswith("store."))
    return found


def test_imports_point_down():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        if relative.name == "__init__" and len(relative.parts) == 1:
            continue
        own = relative.parts[0]
        for module in _store_imports(path):
            if RANK[_layer(module)] > RANK[own]:
                upward.append(f"{relative} imports {module}")
    assert set(upward) == KNOWN_SEAMS


def test_every_module_lives_in_a_layer():
    assert {p.name for p in ROOT.iterdir() if p.suffix == ".py" and p.name != "__init__.py"} == {
        f"{name}.py" for name in ("errors", "clock", "locks", "message_store")}
