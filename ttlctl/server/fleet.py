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

The router's port is chosen free when the fleet is made, but the router starts only once
the replicas are up, a minute later on a CPU, and meanwhile any process on the machine
(the replicas' own connections among them) may take that port: vllm-router then exits
with "Address already in use". Given ``fresh_router`` (a router like the first on newly
chosen ports), the fleet then starts that one instead, up to :data:`ROUTER_TRIES` in all;
so too when the port is found taken before the router starts (a server listening there
would answer the router's health check in its place). :meth:`OwnedFleet.check_running`
tells a caller whether every process still runs (a run through a router that exited did
not go through the fleet). A fleet made with no router makes its first with
``fresh_router`` once the replicas are up, for a router whose flags need what the
replicas say of themselves (their KV block size: :mod:`ttlctl.server.kv_events`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType

from ttlctl.server.client import ServerError
from ttlctl.server.owned import OwnedServer, ServerStartError
from ttlctl.server.process import port_taken

#: router starts tried when its port was taken meanwhile (each on fresh ports)
ROUTER_TRIES = 3
#: what vllm-router (Rust's std::io::Error) says when its port is taken
PORT_TAKEN = "Address already in use"


class OwnedFleet:
    """``replicas`` behind ``router``; the router's URL is the fleet's."""

    def __init__(
        self,
        replicas: Sequence[OwnedServer],
        router: OwnedServer | None,
        *,
        fresh_router: Callable[[], OwnedServer] | None = None,
    ) -> None:
        """``router`` None: ``fresh_router`` makes it once the replicas are up (a router
        whose command needs what the replicas say of themselves)."""
        if not replicas:
            raise ValueError("a fleet needs at least one replica")
        if router is None and fresh_router is None:
            raise ValueError("a fleet needs its router, or a way to make one")
        self.replicas = list(replicas)
        self._router = router
        self.fresh_router = fresh_router
        #: router starts that found their port taken (each retried on fresh ports)
        self.port_retries = 0

    @property
    def router(self) -> OwnedServer:
        """The router (made by ``fresh_router`` when the fleet started, if not given)."""
        if self._router is None:
            raise RuntimeError("the fleet's router is made once its replicas are up")
        return self._router

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
            self._start_router()
            self.check_running()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _start_router(self) -> None:
        if self._router is None:
            assert self.fresh_router is not None
            self.check_running()  # a replica that exited is said as such, not as what it lacks
            self._router = self.fresh_router()
        for attempt in range(1, ROUTER_TRIES + 1):
            last = self.fresh_router is None or attempt == ROUTER_TRIES
            port = self.router.port
            if port is not None and port_taken(port):
                # whatever listens there would answer the router's health check for it
                if last:
                    raise ServerStartError(
                        f"{self.router.name}: port {port} is taken by another process"
                    )
            else:
                try:
                    self.router.start()
                    return
                except ServerStartError as exc:
                    if last or PORT_TAKEN not in self.router.log_tail(lines=20):
                        raise exc from None
            assert self.fresh_router is not None
            self._router = self.fresh_router()
            self.port_retries += 1

    def check_running(self, wait_s: float = 0.0) -> None:
        """:class:`~ttlctl.server.client.ServerError` when the router or a replica has exited
        since it started (one line: which, its exit code, its log's last): calls sent to
        the fleet's URL since then did not go through the fleet. ``wait_s``: asked after a
        call failed, a process may still be dying (its sockets close before it can be
        reaped): look again until that long has passed before answering that all run."""
        deadline = time.monotonic() + wait_s
        while True:
            for server in (*self._made_router(), *self.replicas):
                problem = server.exited()
                if problem is not None:
                    raise ServerError(problem)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the router, then each replica (every stop runs even if one fails)."""
        servers = [*self._made_router(), *reversed(self.replicas)]

        def stop_from(i: int) -> None:
            if i == len(servers):
                return
            try:
                servers[i].stop()
            finally:
                stop_from(i + 1)

        stop_from(0)

    def _made_router(self) -> list[OwnedServer]:
        """The router, if made yet."""
        return [] if self._router is None else [self._router]

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
