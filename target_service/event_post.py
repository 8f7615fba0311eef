"""Hands the engine's events to the gRPC handlers' event loop, a step's worth in one wake-up.

The engine thread puts each request's events into its ``Mailbox`` and calls ``EventPost.flush`` once it
has put a step's (or an abort's) events; the loop then wakes once and fills every mailbox. Handlers await
their mailbox on the loop, so a waiting call holds no thread, and the engine thread is not followed by
one thread wake-up per request per step competing with it for the interpreter lock.
"""

from __future__ import annotations

import asyncio
import threading

from target_service.sequence import FinishEvent, TokenEvent

Event = TokenEvent | FinishEvent


class Mailbox:
    """One request's events: put by the engine thread (held until the next flush), taken on the loop."""

    def __init__(self, post: EventPost):
        self._post = post
        self.events: asyncio.Queue[Event] = asyncio.Queue()

    def put(self, event: Event) -> None:
        self._post.hold(self, event)

    async def get(self) -> Event:
        return await self.events.get()


class EventPost:
    """Events held since the last flush, delivered to the loop with one ``call_soon_threadsafe``."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._held: list[tuple[Mailbox, Event]] = []
        self._lock = threading.Lock()

    def mailbox(self) -> Mailbox:
        return Mailbox(self)

    def hold(self, box: Mailbox, event: Event) -> None:
        with self._lock:
            self._held.append((box, event))

    def flush(self) -> None:
        """Deliver what is held (any thread); a no-op when nothing is."""
        with self._lock:  # scheduled under the lock: two flushes cannot overtake each other
            held, self._held = self._held, []
            if held and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(_deliver, held)


def _deliver(held: list[tuple[Mailbox, Event]]) -> None:
    for box, event in held:
        box.events.put_nowait(event)
