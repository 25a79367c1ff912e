"""Running a coroutine from synchronous code (graders, the server rollout engine, the CLI)."""

from __future__ import annotations

import asyncio


def run_sync(coro):
    """Run a coroutine to completion from sync code, also when called inside a running loop's thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
