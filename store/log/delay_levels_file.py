"""config/delayLevels.json: every delay level table with the commit log offset from which it
applies. The file wins over the table a store is opened with."""

from __future__ import annotations

from pathlib import Path

from store.errors import InvalidConfigError
from store.format.delay_levels import DelayLevels, DelayTable, parse_delay_levels
from store.log.config_file import ConfigFileError, read_config, write_config

DELAY_LEVELS_FILE = "delayLevels.json"


def read_delay_levels(config_dir: Path) -> DelayLevels | None:
    """The tables saved in config/delayLevels.json, None when there is no such file."""
    path = Path(config_dir) / DELAY_LEVELS_FILE
    try:
        content = read_config(path)
    except ConfigFileError as exc:
        raise InvalidConfigError(str(exc)) from None
    if content is None:
        return None
    try:
        tables = [DelayTable(int(t["fromPhysOffset"]), t["delayLevels"], tuple(parse_delay_levels(t["delayLevels"])))
                  for t in content["tables"]]
        starts = [t.from_phys_offset for t in tables]
        if not tables or starts != sorted(starts) or content["delayLevels"] != tables[-1].spec:
            raise ValueError("tables out of order or not ending with the current one")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidConfigError(f"{path}: unreadable delay level tables ({exc})") from None
    return DelayLevels(tables=tables)


def write_delay_levels(config_dir: Path, tables: list[DelayTable]) -> None:
    write_config(Path(config_dir) / DELAY_LEVELS_FILE, {
        "delayLevels": tables[-1].spec,
        "tables": [{"fromPhysOffset": t.from_phys_offset, "delayLevels": t.spec} for t in tables],
    })
