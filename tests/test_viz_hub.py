"""TelemetryHub without an engine: the publish path a replay uses, coalescing, bounded
outboxes that drop the oldest frame, resync snapshots and per-visitor privacy."""
import asyncio
import json
import zlib

from viz.live.hub import SETTLE_TICKS, TelemetryHub
from viz.live.privacy import HIDDEN_TOKEN, PUBLIC


def record(step: int, rid: str = "q1", token: int = 42) -> dict:
    """A minimal record: one decode row of ``rid``."""
    return {
        "schema_version": 1, "step": step, "t_start": 1.0 + step, "t_end": 1.5 + step,
        "durations_ms": {"schedule": 1, "prepare": 1, "forward": 1, "sample": 1, "postprocess": 1,
                         "total": 5},
        "policy": "mixed", "token_budget": 512, "chunked_prefill": True, "num_rows": 1,
        "padded_rows": 1,
        "segments": [{"request_id": rid, "kind": "decode", "row_start": 0, "num_rows": 1,
                      "num_cached": 9, "num_keys": 10, "num_prompt_tokens": 9, "sampled": True}],
        "cu_seqlens_q": [0, 1], "seq_lens_k": [10], "block_tables": {rid: [0]},
        "kv": {"num_blocks": 4, "block_size": 16, "num_free": 3, "num_cached": 0,
               "ref_counts": [1, 0, 0, 0], "owners": [rid, None, None, None], "cached": []},
        "admitted": {}, "preempted": [], "finished": {}, "aborted": [], "sampled": {rid: token},
        "requests": {rid: {"status": "decoding", "num_prompt_tokens": 9, "num_computed_tokens": 9,
                           "num_output_tokens": 1, "prefill_target": 9}},
        "num_waiting": 0, "num_running": 1, "error": None,
    }


def arrival(rid: str, prompt: str = "secret prompt") -> dict:
    return {"kind": "arrival", "request_id": rid, "time": 1.0, "prompt": prompt,
            "num_prompt_tokens": 9, "token_ids": [], "text": "", "finished": False,
            "finish_reason": None, "error": None}


def delta(rid: str, text: str, t: float = 2.0, finished: bool = False) -> dict:
    return {"kind": "delta", "request_id": rid, "time": t, "prompt": None, "num_prompt_tokens": 0,
            "token_ids": [7], "text": text, "finished": finished,
            "finish_reason": "length" if finished else None, "error": None}


def drain(viewer) -> list[dict]:
    async def take():
        out = []
        while viewer._outbox or viewer.needs_snapshot:
            frame = await viewer.next_frame()
            out.append(json.loads(frame.text) if frame is not None else {"type": "snapshot"})
        return out
    return asyncio.run(take())


def connected(hub: TelemetryHub, owner: str | None):
    async def make():
        hub.start = lambda: None  # no pump task: the test calls tick() itself
        return hub.connect(owner)
    return asyncio.run(make())


def test_replayed_records_and_events_reach_viewers_as_frames():
    hub = TelemetryHub(shared_view=True)
    viewer = connected(hub, None)
    assert drain(viewer) == [{"type": "snapshot"}]  # the first message is a snapshot
    hub.publish_event(arrival("q1"))
    hub.publish_record(record(0))
    hub.publish_event(delta("q1", "Hello"))
    hub.publish_event(delta("q1", " world", finished=True))
    hub.tick()
    [frame] = drain(viewer)
    assert frame["type"] == "frame" and [r["step"] for r in frame["records"]] == [0]
    assert [e["kind"] for e in frame["events"]] == ["arrival", "delta", "delta"]
    assert [e["offset"] for e in frame["events"][1:]] == [0, 5]
    assert all(e["visible"] and "owner" not in e for e in frame["events"])
    snapshot = json.loads(hub.snapshot(viewer).text)
    [entry] = snapshot["requests"]
    assert entry["text"] == "Hello world" and entry["finished"] and entry["num_output_tokens"] == 2
    assert [r["step"] for r in snapshot["records"]] == [0]


def test_frames_are_coalesced_per_tick_and_capped():
    hub = TelemetryHub(shared_view=True, max_records_per_frame=4)
    viewer = connected(hub, None)
    drain(viewer)
    for step in range(10):
        hub.publish_record(record(step))
    hub.tick()
    hub.tick()  # nothing new: no frame
    [frame] = drain(viewer)
    assert [r["step"] for r in frame["records"]] == [6, 7, 8, 9]
    assert frame["records_dropped"] == 6


def test_a_room_gets_fewer_larger_frames_and_no_record_is_lost_to_the_lower_rate():
    """Every frame is sent once per viewer: a room shares a budget of frames a second, each viewer
    getting fewer, larger frames (never under one a second), and the status says the rate."""
    hub = TelemetryHub(shared_view=True, fps=25, frames_per_s=100, max_records_per_frame=4)
    first = connected(hub, None)
    assert hub.frame_rate() == 25 and hub.status()["frame_rate"] == {"now": 25, "full": 25}
    room = [first] + [connected(hub, None) for _ in range(9)]
    assert hub.frame_rate() == 10 and hub.records_per_frame() == 10  # 100 frames a second in all
    room += [connected(hub, None) for _ in range(290)]
    assert hub.frame_rate() == 1 and hub.status()["frame_rate"] == {"now": 1, "full": 25}
    assert hub.records_per_frame() == 40  # 100 at this rate, bounded by what a tick keeps
    for viewer in room:
        drain(viewer)
    for step in range(30):  # the engine's steps in the second between two frames
        hub.publish_record(record(step))
    hub.tick()
    [frame] = drain(first)
    assert [r["step"] for r in frame["records"]] == list(range(30)) and frame["records_dropped"] == 0
    unlimited = TelemetryHub(fps=25, frames_per_s=None)
    for _ in range(300):
        connected(unlimited, None)
    assert unlimited.frame_rate() == 25


def test_a_slow_viewer_drops_its_oldest_frames_then_resyncs():
    hub = TelemetryHub(shared_view=True, outbox_frames=3)
    slow, fast = connected(hub, None), connected(hub, None)
    drain(slow)
    drain(fast)
    for step in range(10):
        hub.publish_record(record(step))
        hub.tick()
        drain(fast)
    assert len(slow._outbox) == 3 and slow.dropped == 7 and slow.needs_snapshot
    assert fast.dropped == 0
    assert drain(slow) == [{"type": "snapshot"}]  # the snapshot replaces the stale frames


def test_visitors_read_only_their_own_text():
    hub = TelemetryHub()
    alice, bob, anonymous = (connected(hub, o) for o in ("token-a", "token-b", None))
    for viewer in (alice, bob, anonymous):
        drain(viewer)
    hub.claim("a1", "token-a", "my question")
    hub.claim("p1", PUBLIC, "a replayed request")
    for rid in ("a1", "p1"):
        hub.publish_event(arrival(rid))
        hub.publish_record(record(0 if rid == "a1" else 1, rid, token=99))
        hub.publish_event(delta(rid, f"text of {rid}"))
    hub.tick()
    frames = {name: drain(v)[0] for name, v in (("alice", alice), ("bob", bob), ("anon", anonymous))}
    for name, frame in frames.items():
        events = {(e["request_id"], e["kind"]): e for e in frame["events"]}
        own = name == "alice"
        assert events[("a1", "delta")]["text"] == ("text of a1" if own else "")
        assert events[("a1", "arrival")]["prompt"] == ("secret prompt" if own else None)
        assert events[("a1", "delta")]["mine"] is own
        assert events[("p1", "delta")]["text"] == "text of p1"  # public: everyone reads it
        sampled = frame["records"][0]["sampled"]["a1"]
        assert sampled == (99 if own else HIDDEN_TOKEN)
        assert "token-a" not in json.dumps(frame)  # owner tokens never leave the server
        assert ("my question" in json.dumps(frame)) is own
    bob_view = json.loads(hub.snapshot(bob).text)["requests"]
    assert [e["text"] for e in bob_view] == ["", "text of p1"]


def test_strangers_joining_between_two_changes_share_one_snapshot_tail_compressed_once():
    """A room opens the page at once: the requests and history go into one tail per audience,
    made and compressed once; each viewer's snapshot is its own head then that tail, and its
    bytes inflate to its own text. A change (an event, a step's record) makes the next a new one."""
    hub = TelemetryHub()
    hub.claim("a1", "token-a")
    hub.publish_event(arrival("a1", prompt="my question"))
    hub.publish_record(record(0, "a1", token=99))
    hub.tick()
    first, second, alice = connected(hub, "token-x"), connected(hub, None), connected(hub, "token-a")
    shots = {v.id: hub.snapshot(v) for v in (first, second, alice)}
    assert shots[first.id].tail is shots[second.id].tail  # strangers: one tail
    assert shots[alice.id].tail is not shots[first.id].tail  # her own text: her own tail
    for viewer in (first, second, alice):
        message = shots[viewer.id]
        inflated = zlib.decompress(message.deflated, -zlib.MAX_WBITS).decode()
        assert inflated == message.text
        snapshot = json.loads(inflated)
        assert snapshot["viewer"] == viewer.id and snapshot["status"]["viewers"] == 3
        [entry] = snapshot["requests"]
        assert entry["mine"] is (viewer is alice) and (entry["prompt"] == "my question") is (viewer is alice)
        assert snapshot["records"][0]["sampled"]["a1"] == (99 if viewer is alice else HIDDEN_TOKEN)
    tail = shots[first.id].tail
    hub.tick()  # nothing new: the tail stays
    assert hub.snapshot(connected(hub, None)).tail is tail
    hub.publish_event(delta("a1", "more"))  # the book changes: the next joiner sees it at once,
    late = hub.snapshot(connected(hub, None))  # as the header's counts do (before any tick)
    assert late.tail is not tail and json.loads(late.text)["requests"][0]["num_output_tokens"] == 1


def test_reset_clears_history_and_resyncs_every_viewer():
    hub = TelemetryHub(shared_view=True)
    viewer = connected(hub, None)
    drain(viewer)
    hub.publish_event(arrival("q1"))
    hub.publish_record(record(0))
    hub.tick()
    drain(viewer)
    hub.reset()
    hub.tick()
    assert drain(viewer) == [{"type": "snapshot"}]
    snapshot = json.loads(hub.snapshot(viewer).text)
    assert snapshot["requests"] == [] and snapshot["records"] == []


def test_a_seek_whose_burst_straddles_a_tick_resyncs_the_viewers_once_it_ends():
    """A replay seek republishes the trace at once. When a tick falls inside that burst, the
    viewers' resync snapshot holds its first part and the next frame only its latest records: the
    steps between were in no message, a hole in every page's history (a browser test once waited
    60 s for a step that sat in it). Until a tick carries all that arrived, viewers resync again."""
    hub = TelemetryHub(shared_view=True, max_records_per_frame=4)
    viewer = connected(hub, None)
    drain(viewer)
    hub.reset()
    for step in range(50):  # the burst's first part
        hub.publish_record(record(step))
    hub.tick()
    assert drain(viewer) == [{"type": "snapshot"}]  # taken here: steps 10-49
    for step in range(50, 60):  # the rest of the burst
        hub.publish_record(record(step))
    hub.tick()
    assert drain(viewer) == [{"type": "snapshot"}]  # not a frame of steps 56-59 alone
    snapshot = json.loads(hub.snapshot(viewer).text)
    assert [r["step"] for r in snapshot["records"]] == list(range(20, 60))
    hub.publish_record(record(60))
    hub.tick()  # the burst is over: frames again
    assert [[r["step"] for r in m["records"]] for m in drain(viewer)] == [[60]]
    for step in range(61, 71):  # live, between two ticks: the frame takes the latest, no resync
        hub.publish_record(record(step))
    hub.tick()
    [frame] = drain(viewer)
    assert [r["step"] for r in frame["records"]] == [67, 68, 69, 70] and frame["records_dropped"] == 6


def test_a_replay_played_faster_than_frames_carry_resyncs_only_the_few_ticks_after_a_seek():
    """Holes that last (a replay at 8x into a room's slow frames) are what a live engine gives too:
    after a seek, viewers resync over at most SETTLE_TICKS of them, then get frames again."""
    hub = TelemetryHub(shared_view=True, max_records_per_frame=4)
    viewer = connected(hub, None)
    drain(viewer)
    hub.reset()
    hub.tick()
    assert drain(viewer) == [{"type": "snapshot"}]
    kinds = []
    for tick in range(SETTLE_TICKS + 2):
        for step in range(10 * tick, 10 * tick + 10):
            hub.publish_record(record(step))
        hub.tick()
        kinds += [m["type"] for m in drain(viewer)]
    assert kinds == ["snapshot"] * SETTLE_TICKS + ["frame", "frame"]


def test_shared_view_marks_each_viewers_own_requests():
    hub = TelemetryHub(shared_view=True)
    alice, bob = connected(hub, "token-a"), connected(hub, "token-b")
    for viewer in (alice, bob):
        drain(viewer)
    hub.claim("a1", "token-a")
    hub.publish_event(delta("a1", "hi"))
    hub.tick()
    [(a_event,)], [(b_event,)] = ([f["events"] for f in drain(v)] for v in (alice, bob))
    assert a_event["mine"] and not b_event["mine"]
    assert a_event["text"] == b_event["text"] == "hi"  # shared: everyone reads it


def test_viewers_owning_no_request_share_the_anonymous_frame():
    hub = TelemetryHub()
    owner = connected(hub, "token-a")
    strangers = [connected(hub, f"made-up-{i}") for i in range(3)] + [connected(hub, None)]
    for viewer in (owner, *strangers):
        drain(viewer)
    hub.claim("a1", "token-a")
    hub.publish_event(delta("a1", "secret"))
    hub.publish_record(record(0, "a1", token=99))
    hub.tick()
    frames = [v._outbox[0] for v in strangers]
    assert all(frame is frames[0] for frame in frames)  # serialised once for all of them
    assert owner._outbox[0] is not frames[0] and "secret" in owner._outbox[0].text
    assert json.loads(frames[0].text)["records"][0]["sampled"] == {"a1": HIDDEN_TOKEN}
    deflated = frames[0].deflated  # and compressed once for all of them
    assert all(frame.deflated is deflated for frame in frames)
    assert zlib.decompress(deflated, -zlib.MAX_WBITS).decode() == frames[0].text


def test_a_late_viewer_gets_every_step_since_the_oldest_request_on_screen():
    """A page that connects late folds its autopsy lanes from the snapshot: it needs the steps
    since each shown request arrived, not the latest 40 only."""
    hub = TelemetryHub()
    hub.publish_event(arrival("q1"))  # arrives at t=1.0, decodes for 100 steps
    for step in range(100):
        hub.publish_record(record(step))
        if step % 10 == 9:
            hub.tick()
    late = connected(hub, None)
    assert [r["step"] for r in json.loads(hub.snapshot(late).text)["records"]] == list(range(100))


def test_the_history_keeps_the_latest_40_when_no_card_needs_more():
    hub = TelemetryHub()
    for step in range(100):  # records of a request whose arrival nobody saw
        hub.publish_record(record(step))
        hub.tick()
    late = connected(hub, None)
    assert [r["step"] for r in json.loads(hub.snapshot(late).text)["records"]] == list(range(60, 100))
