"""The HTTP server class kitae's loopback servers share (stdlib only, cheap to import)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server with a deeper accept queue: the default of 5 drops bursts of connections
    (a judge sending a batch of groups at once), and each dropped one waits a second for the TCP retry."""

    daemon_threads = True
    request_queue_size = 128
