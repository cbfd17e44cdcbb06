"""Service functions: plain Python over the store and the database (no FastAPI imports)."""
