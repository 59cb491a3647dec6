"""The one door to a vLLM server: what ttlctl says to a running server and how it runs one.

:mod:`ttlctl.server.process` (free ports, waiting for ``/health``, stopping a server's
process group), :mod:`ttlctl.server.sse` (the chunks of a streamed completion) and
:mod:`ttlctl.server.prom` (Prometheus text: labels, the server URL). The profiler of a
live server, live replay, validate and serve go through here; the HTTP client and
the launch code of those callers move in here next.
"""
