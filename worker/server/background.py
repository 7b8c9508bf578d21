"""Serve apps on 127.0.0.1 from a background thread (tests and the server benchmark).

The engines and the apps share one event loop in that thread, as they do under
``specd serve``; callers reach the engines in-process with ``call(coro)``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import uvicorn

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BackgroundServers:
    """uvicorn servers for ``apps`` plus engine start/stop, on one loop in one thread."""

    def __init__(self, apps: dict[str, Any], engines: Sequence[Any] = (),
                 start_timeout: float = 600.0, log_level: str = "warning") -> None:
        self.engines = list(engines)
        self.ports = {name: free_port() for name in apps}
        self.loop = asyncio.new_event_loop()
        self.servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1",
                                                      port=self.ports[name], lifespan="on",
                                                      log_level=log_level))
                        for name, app in apps.items()]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="specd-servers", daemon=True)
        self.thread.start()
        deadline = time.time() + start_timeout
        while not all(s.started for s in self.servers):
            if not self.thread.is_alive() or time.time() > deadline:
                raise RuntimeError(f"servers did not start: {self.error!r}")
            time.sleep(0.05)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            for engine in self.engines:
                await engine.start()
            await asyncio.gather(*(s.serve() for s in self.servers))
            for engine in self.engines:
                await engine.stop(drain=False)

        try:
            self.loop.run_until_complete(main())
        except BaseException as exc:  # reported by the constructor's wait
            self.error = exc
            raise

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 600.0) -> T:
        """Run ``make()`` on the servers' loop (where the engines live) and wait for it."""

        async def wrapper() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout)

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True
        self.thread.join(timeout=120)
