"""Work a backend runs after it has answered: background responses, files and batches.

Between ``api`` and ``server``: a job calls an API's parser and renderer and the
simulator, so it cannot live in protocol-blind ``sim``, and it is not HTTP. Each
backend has one :class:`Jobs`; the server registers :meth:`Jobs.routes` beside the
API catalog's routes.
"""

from __future__ import annotations

from ..api.routing import ApiRoute
from ..sim.simulator import Simulator
from .background import BackgroundJob, BackgroundJobs
from .batch_routes import BatchRoutes
from .stored_responses import StoredResponses

__all__ = ["BackgroundJob", "BackgroundJobs", "Jobs"]


class Jobs:
    """One backend's background responses, files and batches, and the routes that read them."""

    def __init__(self, simulator: Simulator) -> None:
        self.background = BackgroundJobs()  # the Responses API's background: true
        self.batches = BatchRoutes(simulator)  # OpenAI's files and batches, Anthropic's message batches
        self._stored = StoredResponses(self.background)

    def routes(self) -> tuple[ApiRoute, ...]:
        """Every route served from the jobs' stores."""
        return (*self._stored.routes(), *self.batches.routes())

    def clear(self) -> None:
        """Forget every job and file (a backend reset)."""
        self.background.clear()
        self.batches.clear()
