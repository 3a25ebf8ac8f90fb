"""RequestStream and the Fanout's delivery to event loops: every delta reaches its consumer in
order, and one step's deltas wake a consumer event loop once, not once per request (each wake is
a write to the loop's self-pipe from the engine thread, and a GIL hand-over to the loop)."""
from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from engine.fanout import Fanout
from engine.outputs import RequestDelta
from engine.request_states import RequestStates


def request(rid: str) -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, prompt_token_ids=[1, 2], arrival_time=0.0,
                           sampling_params=SimpleNamespace(logprobs=None))


class CountingLoop:
    """An event loop in its own thread that counts the engine thread's wake-ups."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.wakes = 0
        wake = self.loop.call_soon_threadsafe

        def counted(*args):
            self.wakes += 1
            return wake(*args)

        self.loop.call_soon_threadsafe = counted

    def consume(self, streams) -> tuple[threading.Thread, dict[str, list[str]], threading.Event]:
        got: dict[str, list[str]] = {s.request_id: [] for s in streams}
        waiting = threading.Event()

        async def one(stream):
            async for delta in stream:
                got[stream.request_id].append(delta.text)

        async def all_of():
            tasks = [asyncio.ensure_future(one(s)) for s in streams]
            await asyncio.sleep(0)  # every consumer is waiting on its stream now
            waiting.set()
            await asyncio.gather(*tasks)

        thread = threading.Thread(target=self.loop.run_until_complete, args=(all_of(),))
        thread.start()
        return thread, got, waiting


def test_a_step_wakes_each_consumer_loop_once_and_every_delta_arrives_in_order():
    fanout = Fanout(RequestStates())
    ids = [f"r{k}" for k in range(8)]
    streams = [fanout.open(request(rid)) for rid in ids]
    counting = CountingLoop()
    thread, got, waiting = counting.consume(streams)
    assert waiting.wait(10)
    for step in range(3):
        last = step == 2
        fanout.deliver([RequestDelta(rid, [step], f"{rid}.{step}", last, "length" if last else None)
                        for rid in ids])
    thread.join(10)
    assert not thread.is_alive()
    assert got == {rid: [f"{rid}.{k}" for k in range(3)] for rid in ids}
    assert counting.wakes <= 3  # one a step at most (none when the loop has not waited yet)
    counting.loop.close()


def test_a_thread_reader_and_a_loop_reader_both_get_their_deltas():
    fanout = Fanout(RequestStates())
    threaded, looped = fanout.open(request("t")), fanout.open(request("l"))
    counting = CountingLoop()
    thread, got, waiting = counting.consume([looped])
    assert waiting.wait(10)
    fanout.deliver([RequestDelta("t", [1], "a", True, "stop"), RequestDelta("l", [1], "b", True, "stop")])
    assert [d.text for d in threaded] == ["a"]
    thread.join(10)
    assert got == {"l": ["b"]}
    counting.loop.close()
