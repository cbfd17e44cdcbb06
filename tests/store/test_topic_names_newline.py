"""A name that ends in a newline is not a name (issue #14): Python's `$` matches before a final
newline, so the store took "abc\n" as a topic and a group."""

from __future__ import annotations

import pytest

from store.broker.metadata import GroupConfig, MetadataError, checked_group
from store.errors import InvalidMessageError
from store.format import topics


@pytest.mark.parametrize("name", ["abc\n", "abc\r\n", "\nabc", "a\nb"])
def test_names_with_a_newline_are_refused(name):
    with pytest.raises(InvalidMessageError):
        topics.validate_topic(name)
    with pytest.raises(MetadataError):
        checked_group(GroupConfig(name))
