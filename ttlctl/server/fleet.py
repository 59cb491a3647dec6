"""A fleet ttlctl starts for itself: N vLLM replicas and vLLM's router in front, one door.

:class:`OwnedFleet` holds the replicas' and the router's
:class:`~ttlctl.server.owned.OwnedServer`: :meth:`OwnedFleet.start` launches the
replicas side by side, waits until each is healthy, then starts the router (its
``--worker-urls`` the replicas) and waits for it; :meth:`OwnedFleet.stop` stops the
router, then every replica, each one's whole process group (API server, EngineCore and
the rest), also when one of the stops fails. As for one server, SIGTERM and SIGHUP
unwind the owner's stack while the fleet is held, so a ``with`` block (or a ``finally``)
stops everything it started on exit, an error, Ctrl-C, SIGTERM or SIGHUP; a fleet that
fails to start is stopped before the error is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from ttlctl.server.owned import OwnedServer


class OwnedFleet:
    """``replicas`` behind ``router``; the router's URL is the fleet's."""

    def __init__(self, replicas: Sequence[OwnedServer], router: OwnedServer) -> None:
        if not replicas:
            raise ValueError("a fleet needs at least one replica")
        self.replicas = list(replicas)
        self.router = router

    @property
    def url(self) -> str:
        return self.router.url

    def start(self) -> str:
        """Start the replicas, then the router; the router's URL. On any failure (a
        :class:`~ttlctl.server.owned.ServerStartError` naming which), everything started
        is stopped first."""
        try:
            for replica in self.replicas:
                replica.launch()
            for replica in self.replicas:
                replica.wait_ready()
            self.router.start()
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop the router, then each replica (every stop runs even if one fails)."""
        servers = [self.router, *reversed(self.replicas)]

        def stop_from(i: int) -> None:
            if i == len(servers):
                return
            try:
                servers[i].stop()
            finally:
                stop_from(i + 1)

        stop_from(0)

    def __enter__(self) -> OwnedFleet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
