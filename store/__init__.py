"""Embedded broker store, byte-compatible with Apache RocketMQ's store."""
