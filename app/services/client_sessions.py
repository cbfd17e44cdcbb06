"""Placeholder until the client registry lands (same interface)."""

from __future__ import annotations


class ClientSessions:
    def __init__(self, clock):
        self.clock = clock

    def seen(self, client_id, *, address, language=None, version=None):
        pass

    def settings(self, client_id, **kwargs):
        pass

    def heartbeat(self, client_id, kind, group):
        pass

    def receive_started(self, client_id):
        pass

    def receive_ended(self, client_id):
        pass

    def terminated(self, client_id):
        pass
