"""``consistent-hash``: vllm-router 0.1.17's ``consistent_hash`` policy
(``src/policies/consistent_hash.rs``, key from ``src/policies/hash_key.rs``; read in the
0.1.17 source distribution on PyPI, ``vllm_router-0.1.17.tar.gz``).

A ring of 160 virtual nodes per worker, each at ``fbi_hash("URL:i")`` for the worker's
URL exactly as the router was given it (``--worker-urls``); a request goes to the first
node at or after ``fbi_hash(key)``, wrapping around. The key is the ``X-Session-ID``
header when present, as ``header:x-session-id:VALUE`` (what the router logs); the live
replay sends the program id there, so every call of a program lands on one replica.

So where a program lands depends on the workers' URLs, ports included: given the same
URLs (a fleet spec's ``worker_urls``; ``validate --replicas`` passes the live replicas'
own), the model places every session where the real router does. Without them the
replicas are named :func:`default_urls` (``http://replica-0``, ``http://replica-1``, …),
a fixed, documented placement for offline replays.

Deliberate differences: none. (Two virtual nodes of different workers at one hash — the
router's ``BTreeMap`` keeps the later worker's, in the router's own worker order, which
it draws at start — would be resolved here in the given order instead; with 160 nodes
per worker on FurcHash's 2²³−1 buckets that is a fraction of a percent of the ring.)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless
from replay.fleet.routers.furc import fbi_hash
from ttlctl.errors import ConfigError
from ttlctl.nouns import counted

VIRTUAL_NODES_PER_WORKER = 160
#: the schemes vllm-router 0.1.17 takes in a worker URL ("URL must start with http://,
#: https://, or grpc://")
WORKER_SCHEMES = ("http", "https", "grpc")
#: what a URL's host name cannot hold (the WHATWG URL standard's forbidden domain code
#: points, the ones vllm-router's parser refuses; whitespace is refused apart)
FORBIDDEN_HOST_CHARACTERS = frozenset("#%/:<>?@[\\]^|")


def replica_url(index: int) -> str:
    """The default URL of replica ``index`` (0-based) where no real URL is known."""
    return f"http://replica-{index}"


def default_urls(replicas: int) -> tuple[str, ...]:
    return tuple(replica_url(r) for r in range(replicas))


def worker_urls(replicas: int, given: Sequence[str] | None = None) -> tuple[str, ...]:
    """The workers' URLs in replica order: ``given`` (checked: one per replica, no
    repeats), else :func:`default_urls`."""
    if given is None:
        return default_urls(replicas)
    urls = tuple(given)
    if len(urls) != replicas:
        raise ConfigError(
            f"--worker-urls: {counted(len(urls), 'URL')} given for {counted(replicas, 'replica')}"
        )
    if len(set(urls)) != len(urls):
        raise ConfigError("--worker-urls: a URL is given twice")
    for url in urls:
        problem = _url_problem(url)
        if problem is not None:
            # vllm-router refuses it; a placement hashed from it would be no fleet's
            raise ConfigError(
                f"--worker-urls: {url!r} is not a worker URL ({problem}); give each as "
                "vllm-router is given it, http://HOST:PORT (or https://, grpc://)"
            )
    if len({urlsplit(url).scheme == "grpc" for url in urls}) > 1:
        raise ConfigError(
            "--worker-urls: grpc:// and http(s):// workers in one fleet; vllm-router takes "
            "one kind (grpc:// workers take token ids, http:// ones text)"
        )
    return urls


def _url_problem(url: str) -> str | None:
    """Why vllm-router 0.1.17 would refuse ``url`` as a worker (its URL parser: a scheme it
    takes, a host, a port 0 to 65535), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # a bracketed host that is no IPv6 address, or unclosed
        return "its host is no valid IPv6 address in brackets"
    if parts.scheme not in WORKER_SCHEMES:
        return "its scheme is not http, https or grpc"
    if not host:
        return "no host"
    if not parts.netloc.rpartition("@")[2].startswith("[") and any(
        c in FORBIDDEN_HOST_CHARACTERS or c.isspace() for c in host
    ):
        return "a character a host name cannot hold"
    try:
        parts.port  # noqa: B018 (read for the ValueError it raises)
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return None


def session_key(session: str) -> str:
    return f"header:x-session-id:{session}"


@dataclass(slots=True)
class HashRing:
    """The router's ring over ``urls`` (replica i is ``urls[i]``)."""

    urls: tuple[str, ...]
    virtual_nodes: int = VIRTUAL_NODES_PER_WORKER
    _points: list[int] = field(default_factory=list)
    _owners: list[int] = field(default_factory=list)
    _memo: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ring: dict[int, int] = {}
        for r, url in enumerate(self.urls):
            for i in range(self.virtual_nodes):
                # a BTreeMap insert: a later worker's node replaces an equal hash
                ring[fbi_hash(f"{url}:{i}")] = r
        self._points = sorted(ring)
        self._owners = [ring[p] for p in self._points]

    def owner(self, session: str) -> int:
        """The replica the ring gives ``session`` (its ``X-Session-ID``)."""
        at = self._memo.get(session)
        if at is None:
            i = bisect_left(self._points, fbi_hash(session_key(session)))
            at = self._owners[i % len(self._points)]
            self._memo[session] = at
        return at


@dataclass(slots=True)
class ConsistentHash(Stateless):
    replicas: int
    #: the workers' URLs, in replica order (None: :func:`default_urls`)
    urls: Sequence[str] | None = None
    name: str = "consistent-hash"
    _ring: HashRing | None = None

    def __post_init__(self) -> None:
        self._ring = HashRing(worker_urls(self.replicas, self.urls))

    def owner(self, session: str) -> int:
        """The replica the ring gives ``session``."""
        assert self._ring is not None
        return self._ring.owner(session)

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        return self.owner(call.session)
