"""`kitae serve model` in this process on a free loopback port, for tests that talk to it over HTTP."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator


@contextlib.contextmanager
def serve_model(folder: Any, **service_options: Any) -> Iterator[str]:
    """The model in `folder` served (kitae.serving.server.load_service's options); yields its base URL and
    shuts the server and its service down after."""
    from kitae.serving.server import load_service, make_server

    service = load_service(folder, **service_options)
    server = make_server(service, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        service.close()
