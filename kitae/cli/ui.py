"""``kitae ui``: the run page, a local web app over the run store (docs/run_page.md).

    kitae ui                                   # http://127.0.0.1:8765/ for the runs under ./runs
    kitae ui --runs /data/runs --port 9000
    KITAE_UI_TOKEN=... kitae ui --host 0.0.0.0 # another address needs an access token
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from kitae.errors import KitaeError

TOKEN_ENV = "KITAE_UI_TOKEN"  # kitae.web.server's, written out so `kitae --help` does not import the web server


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)


def ui(
    runs: Path = typer.Option(Path("runs"), "--runs", help="Folder that holds the runs."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs --token."),
    port: int = typer.Option(8765, "--port", help="Port (0 picks a free one)."),
    token: Optional[str] = typer.Option(None, "--token", help=f"Access token (default: ${TOKEN_ENV}).",
                                        show_default=False),
    poll: float = typer.Option(2.0, "--poll", help="Seconds between live updates of a running run."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every request."),
) -> None:
    """Open the run page: runs, live plots, groups and samples, labels against the grader."""
    from kitae.web.server import make_server

    token = token or os.environ.get(TOKEN_ENV) or None
    try:
        server = make_server(runs, host, port, token, poll, quiet=not verbose)
    except OSError as exc:
        raise KitaeError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port") from exc
    link = server.url + (f"?token={token}" if token else "")
    typer.echo(f"kitae ui: runs in {runs.resolve()}\n  open {link}\n  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        typer.echo("stopped")
    finally:
        server.server_close()
