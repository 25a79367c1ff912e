"""What the serving tests share: small limits so every attack is cheap to send, an access token, and a server
served from a thread."""

from __future__ import annotations

import threading

from kitae.http.server import HttpLimits

LIMITS = HttpLimits(max_body_bytes=64 * 1024, read_timeout_s=1.0)
TOKEN = "t" * 24


def serve_in_thread(server):
    """`server` serving from a daemon thread (shut down by the caller)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server
