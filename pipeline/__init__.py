"""PySpark jobs over the store's files. Depends on store's codec and pure helpers only."""
