"""A real MCP server for the tests, written with the official SDK's MCPServer (FastMCP before mcp 2).

    python tests/agents/mcp_server.py [--http PORT] [--pid-file FILE]

Over stdio by default; ``--http PORT`` serves streamable HTTP at http://127.0.0.1:PORT/mcp. ``--pid-file`` writes
the process id once the tools are registered, so a test can kill the server or check it is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("kitae-test-tools", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then say how long."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def getenv(name: str) -> str:
    """The value of an environment variable of this server, or "" when it is not set."""
    return os.environ.get(name, "")


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("this tool always fails")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--pid-file", default=None)
    parser.add_argument("--child-pid-file", default=None, help="start a child process that sleeps; write its pid here")
    parser.add_argument("--token", default=None,
                        help="over HTTP, answer only requests with Authorization: Bearer TOKEN")
    args = parser.parse_args()
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    if args.child_pid_file:  # a helper process of the server's own, as real servers start them
        import subprocess
        import sys

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(args.child_pid_file).write_text(str(child.pid))
    if args.http is None:
        server.run("stdio")
    elif args.token is None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        import uvicorn

        app = needs_token(server.streamable_http_app(host="127.0.0.1"), args.token)
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="error")


def needs_token(app, token: str):
    """The ASGI app, answering 401 to HTTP requests without ``Authorization: Bearer TOKEN``."""

    async def checked(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await app(scope, receive, send)

    return checked


if __name__ == "__main__":
    main()
