"""The hub pump and the viewer transports survive failures (injected)."""
import asyncio
import json
import logging
import time

import pytest
import websockets
from test_viz_hub import record

from viz.live.hub import TelemetryHub

from support.viewers import serve_hub


def test_the_frame_pump_logs_a_failing_tick_and_keeps_going(caplog):
    hub = TelemetryHub(shared_view=True, fps=100)
    unserialisable = {**record(0), "kv": object()}

    async def watch():
        viewer = hub.connect(None)
        await viewer.next_frame()  # the snapshot's turn
        hub.publish_record(unserialisable)
        while await asyncio.wait_for(viewer.next_frame(), 5) is not None:
            pass  # until the failed tick makes the viewer resync
        hub.publish_record(record(1))
        frames = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                r["step"] == 1 for f in frames for r in f.get("records", [])):
            try:
                frame = await asyncio.wait_for(viewer.next_frame(), 0.5)
            except TimeoutError:
                continue
            if frame is not None:  # None: a resync snapshot is due
                frames.append(json.loads(frame.text))
        await hub.stop()
        return frames

    with caplog.at_level(logging.ERROR):
        frames = asyncio.run(watch())
    assert any(r["step"] == 1 for f in frames for r in f["records"])
    assert "frame" in caplog.text and "Traceback" in caplog.text


def test_a_viewer_whose_sender_dies_is_unregistered_and_closed():
    hub = TelemetryHub()

    def broken_snapshot(*_):
        raise RuntimeError("injected snapshot failure")

    hub.snapshot = broken_snapshot

    async def connect(url):
        async with websockets.connect(url) as ws:
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)

    with serve_hub(hub) as server:
        asyncio.run(connect(server.url.replace("http", "ws") + "/ws/telemetry"))
        deadline = time.monotonic() + 5
        while hub.viewers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.viewers == []
