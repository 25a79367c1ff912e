"""The run page: a local web app over the run store (``kitae ui``). Guide: docs/run_page.md.

- :mod:`kitae.web.server`: the HTTP server (standard library ThreadingHTTPServer), access token, headers;
- :mod:`kitae.web.api`: the JSON endpoints, registered by name, reading only ``runs/NAME/run.db``;
- :mod:`kitae.web.panels`: which metrics share a plot;
- :mod:`kitae.web.downsample`: LTTB downsampling of long series;
- :mod:`kitae.web.labels`: your own scores (``runs/NAME/labels.jsonl``) and the grader's agreement with them;
- ``static/``: the page itself (vanilla JS, SVG plots written here, no build step, nothing from a CDN).
"""

from kitae.web.server import UIServer, check_bind, make_server, serve_in_thread

__all__ = ["UIServer", "check_bind", "make_server", "serve_in_thread"]
