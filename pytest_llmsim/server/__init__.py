"""The HTTP side: the app and its routes, request bodies, the responder, the servers, the control API.

HTTP only: it knows requests, sockets and framing, and hands every body to a wire API's adapter
(``pytest_llmsim.api``) and every request to the simulator (``pytest_llmsim.sim``).
"""

from .app import SimulatorServer, validate_address

__all__ = ["SimulatorServer", "validate_address"]
