"""Content search over the commit log: the records whose body or a property holds a text."""
