"""Rows of the tables mqadmin prints, to compare the console's answers with."""

from __future__ import annotations


def table_rows(text: str, min_fields: int, number_column: int) -> list[list[str]]:
    """The data rows of an mqadmin table: at least `min_fields` fields, a number in `number_column`
    (which leaves out the header line), no comment lines."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= min_fields and not line.startswith("#") and fields[number_column].isdigit():
            rows.append(fields)
    return rows


def cluster_list(text: str) -> list[tuple[str, str, int, str, str]]:
    """(cluster, broker, broker id, address, version) rows of `mqadmin clusterList`, sorted."""
    return sorted((f[0], f[1], int(f[2]), f[3], f[4]) for f in table_rows(text, 5, 2))


def topic_status_rows(text: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(broker, queue id) -> (min offset, max offset) of `mqadmin topicStatus`."""
    return {(f[0], int(f[1])): (int(f[2]), int(f[3])) for f in table_rows(text, 4, 1)}


def consumer_progress_rows(text: str) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(topic, broker, queue id) -> (broker offset, consumer offset) of `mqadmin consumerProgress`."""
    return {(f[0], f[1], int(f[2])): (int(f[3]), int(f[4])) for f in table_rows(text, 6, 2)}
