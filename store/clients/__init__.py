"""Consumers built on the store's public API (above the message_store facade)."""
