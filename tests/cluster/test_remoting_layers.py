"""The cluster package sits beside the store: it may read the store's record codec, never the app."""

from __future__ import annotations

import ast
from pathlib import Path

import cluster

ROOT = Path(cluster.__file__).parent
ALLOWED_STORE_MODULES = ("store.errors", "store.format")


def imported_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def test_cluster_imports_only_the_store_codec():
    wrong = [f"{path.relative_to(ROOT)} imports {module}"
             for path in sorted(ROOT.rglob("*.py")) for module in imported_modules(path)
             if module.split(".")[0] in {"app", "pipeline", "tests"}
             or (module.split(".")[0] == "store" and not module.startswith(ALLOWED_STORE_MODULES))]
    assert wrong == []
