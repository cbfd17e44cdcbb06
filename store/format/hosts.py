"""Socket addresses as stored in records: 4 or 16 address bytes plus a 4-byte port."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostAddress:
    address: bytes  # 4 bytes (IPv4) or 16 bytes (IPv6)
    port: int

    @property
    def is_ipv6(self) -> bool:
        return len(self.address) == 16

    @classmethod
    def parse(cls, text: str) -> HostAddress:
        """Parse 'a.b.c.d:port', '[v6]:port' or 'v6-with-colons:port' (Java's form)."""
        text = text.strip()
        if text.startswith("["):
            host, _, port_text = text[1:].partition("]:")
        else:
            host, _, port_text = text.rpartition(":")
        try:
            ip = ipaddress.ip_address(host)
            port = int(port_text)
        except ValueError as exc:
            raise ValueError(f"not a host address: {text!r}") from exc
        if not 0 <= port <= 0x7FFFFFFF:
            raise ValueError(f"port out of range in {text!r}")
        return cls(ip.packed, port)

    def host_text(self) -> str:
        """The address the way Java's InetAddress.getHostAddress() writes it."""
        if not self.is_ipv6:
            return ".".join(str(b) for b in self.address)
        groups = [int.from_bytes(self.address[i : i + 2], "big") for i in range(0, 16, 2)]
        return ":".join(f"{g:x}" for g in groups)

    def __str__(self) -> str:
        host = self.host_text()
        return f"[{host}]:{self.port}" if self.is_ipv6 else f"{host}:{self.port}"
