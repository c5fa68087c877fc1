"""A local HTTP server with given answers, for tests of what glm5svc does with a server's
replies (an engine, a gateway) that a real one cannot be made to give."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aiohttp import web


@contextmanager
def stub(routes: dict[tuple[str, str], Callable[[web.Request], web.Response]]) -> Iterator[str]:
    """An HTTP server answering `routes` ((method, path) -> handler); yields its base URL."""
    app = web.Application()
    for (method, path), handler in routes.items():

        async def handle(request, handler=handler):
            return handler(request)

        app.router.add_route(method, path, handle)
    runner = web.AppRunner(app)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
