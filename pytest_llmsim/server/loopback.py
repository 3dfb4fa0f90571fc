"""Loopback: whether a host is this machine only, and reaching one without a proxy.

A backend on this machine is never reached through the proxy that ``HTTP_PROXY`` names: a CI machine
behind a corporate proxy often leaves loopback out of ``NO_PROXY``, and the proxy cannot reach our
loopback anyway.
"""

from __future__ import annotations

import ipaddress
import urllib.request

__all__ = ["DIRECT", "is_loopback"]

#: An opener that ignores the environment's proxies (for addresses on this machine).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
