"""One Spark session per test worker (starting one costs seconds), local[2]."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator:
    session = spark_session("local[2]", app_name="mqlens-tests", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()
