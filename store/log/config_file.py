"""Broker config files (config/*.json): written so that a crash leaves the old or the new
version, never a torn one, and read in RocketMQ's fastjson form as well as standard JSON."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from store.errors import DiskFullError, StoreError, is_no_space

BACKUP_SUFFIX = ".bak"
TEMP_SUFFIX = ".tmp"


class ConfigFileError(StoreError):
    """A config file and its backup are both unreadable."""


def quote_integer_keys(text: str) -> str:
    """fastjson writes map keys that are integers without quotes ({0:8,1:8}); quote them so
    the text is standard JSON. Strings are copied as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    expecting_key = False
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
            expecting_key = False
            continue
        if c in "{,":
            expecting_key = True
        elif expecting_key and (c.isdigit() or c == "-"):
            end = i + 1
            while end < n and text[end].isdigit():
                end += 1
            rest = end
            while rest < n and text[rest] in " \t\r\n":
                rest += 1
            if rest < n and text[rest] == ":":
                out.append(f'"{text[i:end]}"')
                i = end
                expecting_key = False
                continue
        elif not c.isspace():
            expecting_key = False
        out.append(c)
        i += 1
    return "".join(out)


def loads(text: str) -> Any:
    return json.loads(quote_integer_keys(text))


def read_config(path: Path) -> Any | None:
    """The file's content, else its backup's (a crash between the two writes), else None when
    neither exists. Raises ConfigFileError when what exists cannot be read."""
    problems = []
    for candidate in (path, path.with_name(path.name + BACKUP_SUFFIX)):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{candidate.name}: {exc}")
            continue
        if not text.strip():  # RocketMQ treats an empty file as absent too
            continue
        try:
            return loads(text)
        except ValueError as exc:
            problems.append(f"{candidate.name}: {exc}")
    if problems:
        raise ConfigFileError(f"cannot read {path}: " + "; ".join(problems))
    return None


def write_config(path: Path, content: Any, *, compact: bool = False) -> None:
    """Write `content` as JSON: to a temporary file, synced, the previous version kept as .bak,
    then renamed into place and the directory synced. `compact` drops the indentation (for
    large state files, where it costs more time and space than it helps a reader). A write the
    disk has no room for raises DiskFullError, leaving the previous version and no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + TEMP_SUFFIX)
    layout = {"separators": (",", ":")} if compact else {"indent": 2}
    data = json.dumps(content, sort_keys=True, **layout).encode("utf-8") + b"\n"
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            _copy_durably(path, path.with_name(path.name + BACKUP_SUFFIX))
        os.replace(temp, path)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if is_no_space(exc):
            raise DiskFullError(f"no space left to write {path.parent.name}/{path.name}: the change is "
                                "not applied; writes are refused until space is freed, reads go on") from exc
        raise
    _sync_directory(path.parent)


def remove_leftover_temps(config_dir: Path) -> list[str]:
    """Remove the temporary files a crash left in `config_dir` mid-write: a write counts only
    once renamed into place, so each is an unfinished change the caller must redo. Returns
    their names (call only with the store's lock held)."""
    removed = []
    for temp in sorted(Path(config_dir).glob(f"*{TEMP_SUFFIX}")):
        temp.unlink(missing_ok=True)
        removed.append(temp.name)
    return removed


def _copy_durably(source: Path, target: Path) -> None:
    """Copy `source` over `target` through a temporary file, so a failed copy leaves the old target."""
    temp = target.with_name(target.name + TEMP_SUFFIX)
    try:
        shutil.copyfile(source, temp)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateFile:
    """A config file of in-memory state: changed under `lock`, written by `persist` when
    something changed, one writer at a time so an older state never overwrites a newer one."""

    compact = False  # no indentation: for large files, where it costs more than it helps a reader

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._changed = False

    def mark_changed(self) -> None:
        """Call with `lock` held, after changing the state."""
        self._changed = True

    def content_json(self) -> dict:
        """The whole file to write, or a capture cheaper to take that `to_json` makes into it
        (called with `lock` held)."""
        raise NotImplementedError

    def to_json(self, content) -> dict:
        return content

    def snapshot(self) -> dict | None:
        """The content to write as of now, None when nothing changed since the last snapshot.
        For a caller that must take it at a precise moment and write it later, in order."""
        with self.lock:
            if not self._changed:
                return None
            self._changed = False
            return self.content_json()

    def write_snapshot(self, content: dict | None) -> None:
        with self._persist_lock:
            self._write(content)

    def _write(self, content: dict | None) -> None:
        if content is None:
            return
        try:
            write_config(self.path, self.to_json(content), compact=self.compact)
        except BaseException:
            with self.lock:
                self._changed = True
            raise

    def persist(self) -> None:
        with self._persist_lock:
            self._write(self.snapshot())


class OffsetTableFile(StateFile):
    """A config file holding {"offsetTable": {...}} (consumerOffset.json, delayOffset.json)."""

    def __init__(self, path: Path, error: type[StoreError]):
        super().__init__(path)
        self._error = error

    def read_content(self) -> dict:
        """The saved file, empty when there is none yet."""
        content = read_config(self.path)
        if content is None:
            return {}
        if not isinstance(content, dict):
            raise self._error(f"{self.path} does not hold an object")
        return content

    def read_table(self, content: dict | None = None) -> dict:
        """The saved offsetTable (of `content` when the file was read already), empty when there
        is no file yet."""
        content = self.read_content() if content is None else content
        if not content:
            return {}
        table = content.get("offsetTable")
        if not isinstance(table, dict):
            raise self._error(f"{self.path} has no offsetTable object")
        return table

    def table_json(self) -> dict:
        """The offsetTable to write, with string keys (called with `lock` held)."""
        raise NotImplementedError

    def content_json(self) -> dict:
        return {"offsetTable": self.table_json()}
