"""Failed sign-ins slow down the next tries, so that guessing is slow and nobody can lock the
owner of a name out of it:

- one name from one address: `free_failures` failures, then each try waits a backoff after
  the last failure: 1 s, doubling with each further failure up to 15 min. A success from there,
  or an hour without failures, forgets them. This holds the guessing address only.
- one address, any names: at most ten times `free_failures` failures a minute (spraying names).
- one name, any addresses: past five times `free_failures` failures in 15 minutes the name is
  under attack, and every address gets one free failure for it before its backoff starts. A
  distributed attacker gets a guess per address; the owner's first try from an address of their
  own always goes through.

Time comes from the injected clock. What is remembered is bounded: the least recently failed
entries are forgotten first."""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from store.clock import Clock

BACKOFF_BASE_MS = 1_000
BACKOFF_MAX_MS = 15 * 60_000
FORGET_AFTER_MS = 60 * 60_000
ADDRESS_WINDOW_MS = 60_000
NAME_WINDOW_MS = 15 * 60_000
ADDRESS_FACTOR = 10  # the per-address bound, in `free_failures`
NAME_FACTOR = 5  # failures of a name from anywhere that put it under attack, in `free_failures`
MAX_TRACKED = 100_000


class _Recent:
    """The last `limit` failure times of each key, for a moving window of `window_ms`."""

    def __init__(self, limit: int, window_ms: int):
        self.limit, self.window_ms = limit, window_ms
        self._times: OrderedDict[str, deque[int]] = OrderedDict()

    def full_until_ms(self, key: str, now_ms: int) -> int:
        """When the window has room again for `key` (at or before now: it has room)."""
        times = self._times.get(key)
        if times is None or len(times) < self.limit:
            return 0
        return times[0] + self.window_ms

    def add(self, key: str, now_ms: int) -> None:
        times = self._times.pop(key, None) or deque(maxlen=self.limit)
        times.append(now_ms)
        self._times[key] = times
        while len(self._times) > MAX_TRACKED:
            self._times.popitem(last=False)

    def take_back(self, key: str, at_ms: int) -> None:
        times = self._times.get(key)
        if times is not None and at_ms in times:
            times.remove(at_ms)


class LoginLimiter:
    def __init__(self, clock: Clock, free_failures: int):
        self.clock = clock
        self.free_failures = free_failures
        self._pairs: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()  # failures, last at
        self._per_address = _Recent(free_failures * ADDRESS_FACTOR, ADDRESS_WINDOW_MS)
        self._per_name = _Recent(free_failures * NAME_FACTOR, NAME_WINDOW_MS)

    @staticmethod
    def _name_key(name: str) -> str:
        return name[:64].lower()

    def _backoff_until_ms(self, name: str, client: str, now_ms: int) -> int:
        failures, last_ms = self._pairs.get((name, client), (0, 0))
        if failures == 0 or now_ms - last_ms >= FORGET_AFTER_MS:
            return 0
        under_attack = self._per_name.full_until_ms(name, now_ms) > now_ms
        free = 1 if under_attack else self.free_failures
        if failures < free:
            return 0
        return last_ms + min(BACKOFF_BASE_MS << min(failures - free, 20), BACKOFF_MAX_MS)

    def retry_after_s(self, name: str, client: str) -> int:
        """0 when a sign-in may be tried now, else the seconds until it may."""
        name, now = self._name_key(name), self.clock.now_ms()
        until = max(self._backoff_until_ms(name, client, now), self._per_address.full_until_ms(client, now))
        return max(1, math.ceil((until - now) / 1000)) if until > now else 0

    def failed(self, name: str, client: str) -> int:
        """A failure of `name` from `client`; charged before the password is checked, so that
        guesses sent in parallel meet the failures of the ones before them. Returns its time,
        for `succeeded` to take it back."""
        name, now = self._name_key(name), self.clock.now_ms()
        failures, last_ms = self._pairs.pop((name, client), (0, 0))
        if now - last_ms >= FORGET_AFTER_MS:
            failures = 0
        self._pairs[(name, client)] = (failures + 1, now)
        while len(self._pairs) > MAX_TRACKED:
            self._pairs.popitem(last=False)
        self._per_address.add(client, now)
        self._per_name.add(name, now)
        return now

    def succeeded(self, name: str, client: str, charged_at_ms: int) -> None:
        """The name signed in from there: its failures from there are forgotten, and the charge
        made before the check is taken back."""
        name = self._name_key(name)
        self._pairs.pop((name, client), None)
        self._per_address.take_back(client, charged_at_ms)
        self._per_name.take_back(name, charged_at_ms)
