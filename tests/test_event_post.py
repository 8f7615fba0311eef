"""EventPost: events put by the engine thread reach their mailboxes on the loop, in order, one loop wake-up
per flush and none before it."""

from __future__ import annotations

import asyncio
import threading

from target_service.event_post import EventPost
from target_service.sequence import FinishEvent, FinishReason, SpecStats, TokenEvent


def _loop_in_thread() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return loop


def test_a_flush_delivers_every_held_event_in_order_with_one_wake_up():
    loop = _loop_in_thread()
    post = EventPost(loop)
    wakeups = []
    real = loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *a: (wakeups.append(a), real(*a))[1]
    boxes = [post.mailbox() for _ in range(3)]
    for step in range(2):
        for i, box in enumerate(boxes):
            box.put(TokenEvent((10 * i + step,), f"{i}:{step} "))
    boxes[1].put(FinishEvent(FinishReason.LENGTH, 4, 2, SpecStats()))

    async def sizes():
        return [b.events.qsize() for b in boxes]

    assert asyncio.run_coroutine_threadsafe(sizes(), loop).result(5) == [0, 0, 0]  # held until the flush
    wakeups.clear()  # that check woke the loop too
    post.flush()
    post.flush()  # nothing held: no second wake-up
    assert len(wakeups) == 1

    async def drain(box, n):
        return [await asyncio.wait_for(box.get(), 5) for _ in range(n)]

    got = [asyncio.run_coroutine_threadsafe(drain(b, n), loop).result(10) for b, n in zip(boxes, (2, 3, 2))]
    assert [[e.text for e in events[:2]] for events in got] == [[f"{i}:0 ", f"{i}:1 "] for i in range(3)]
    assert isinstance(got[1][2], FinishEvent) and got[1][2].completion_tokens == 2
    loop.call_soon_threadsafe(loop.stop)


def test_a_flush_after_the_loop_closed_is_a_no_op():
    loop = asyncio.new_event_loop()
    post = EventPost(loop)
    post.mailbox().put(TokenEvent((1,), "a"))
    loop.close()
    post.flush()  # a server shutting down: nothing to deliver to, and no error
