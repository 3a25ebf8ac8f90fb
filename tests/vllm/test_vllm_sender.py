"""The plugin's sender never holds up vLLM's step loop: Batchscope down, stalled, restarting,
or refusing the token (loopback only; no vLLM needed)."""
import logging
import socket

from batchscope_vllm.sender import IngestSender
from ingest_receiver import Receiver, wait_until

HELLO = {"token": "secret", "engine": {"name": "vllm", "version": "0.32.0"},
         "info": {"model": "m", "block_size": 16, "num_kv_blocks": 8, "max_model_len": 64,
                  "phases": ["schedule", "execute", "update"], "trace_header": {}}}
FAST_RETRY = (0.05, 0.2)


def sender_for(url: str, capacity: int = 8, hello: dict = HELLO) -> IngestSender:
    return IngestSender(url, hello, capacity=capacity, backoff=FAST_RETRY).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(step: int, payload: str = "") -> dict:
    return {"step": step, "payload": payload}


def test_hello_first_then_records_in_step_order_and_stats():
    with Receiver() as receiver:
        sender = sender_for(receiver.url, capacity=64)
        for step in range(20):
            sender.submit(record(step))
        wait_until(lambda: len(receiver.records) == 20, "20 records")
        wait_until(lambda: receiver.stats, "a stats message")
        sender.close()
    hello = receiver.hellos[0]
    assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["token"] == "secret"
    assert hello["engine"]["name"] == "vllm" and hello["info"]["phases"][0] == "schedule"
    assert [r["step"] for r in receiver.records] == list(range(20))
    assert receiver.stats[0] == {"type": "stats", "dropped": 0, "sent": 0}


def test_no_batchscope_drops_the_oldest_records_and_counts_them(caplog):
    caplog.set_level(logging.WARNING, logger="vllm.batchscope")
    sender = sender_for(f"ws://127.0.0.1:{free_port()}/ingest", capacity=8)
    for step in range(1000):
        sender.submit(record(step))
    assert sender.dropped == 1000 - 8
    wait_until(lambda: "unreachable" in caplog.text, "the unreachable warning")
    sender.close(timeout=0.5)
    assert caplog.text.count("unreachable") == 1  # one warning per outage, not per attempt


def test_stalled_batchscope_never_blocks_submit_and_reports_drops():
    big = "x" * 65536  # fills the socket buffers quickly once the server stops reading
    with Receiver() as receiver:
        sender = sender_for(receiver.url, capacity=8)
        sender.submit(record(0))
        wait_until(lambda: receiver.records, "the first record")
        receiver.reading.clear()
        for step in range(1, 501):
            sender.submit(record(step, big))
        assert sender.dropped > 0  # the loop above finished while nothing was read
        receiver.reading.set()
        wait_until(lambda: receiver.records and receiver.records[-1]["step"] == 500,
                   "the newest record after the stall")
        wait_until(lambda: receiver.stats and receiver.stats[-1]["dropped"] == sender.dropped,
                   "a stats message with the drops")
        sender.close()
    steps = [r["step"] for r in receiver.records]
    assert steps == sorted(steps) and len(steps) + sender.dropped == 501


def test_restarted_batchscope_gets_a_new_hello_and_the_records_after_it():
    port = free_port()
    with Receiver(port=port) as first:
        sender = sender_for(first.url, capacity=64)
        for step in range(10):
            sender.submit(record(step))
        wait_until(lambda: len(first.records) == 10, "records before the restart")
    for step in range(10, 20):  # Batchscope is down
        sender.submit(record(step))
    with Receiver(port=port) as second:
        wait_until(lambda: second.records and second.records[-1]["step"] == 19,
                   "records after the restart")
        sender.close()
    assert len(second.hellos) == 1 and sender.connections == 2
    assert [r["step"] for r in first.records] == list(range(10))
    steps = [r["step"] for r in second.records]
    assert steps == sorted(steps) and set(steps) <= set(range(10, 20))


def test_wrong_token_is_refused_logged_once_and_nothing_is_sent(caplog):
    caplog.set_level(logging.ERROR, logger="vllm.batchscope")
    with Receiver(token="right") as receiver:
        sender = sender_for(receiver.url, hello={**HELLO, "token": "wrong"})
        sender.submit(record(0))
        wait_until(lambda: len(receiver.hellos) >= 3, "three attempts")
        sender.close(timeout=0.5)
    assert receiver.records == [] and sender.connections == 0
    assert caplog.text.count("refused this engine") == 1 and "4401" in caplog.text


def test_an_idle_engine_says_hello_again_as_soon_as_batchscope_is_back():
    """An idle vLLM has no step to send, and so no send to fail: the sender must still notice
    that Batchscope went away, or a restarted dashboard waits for vLLM until its next step."""
    port = free_port()
    with Receiver(port=port) as first:
        sender = sender_for(first.url)
        wait_until(lambda: first.hellos, "the first hello")
    with Receiver(port=port) as second:
        wait_until(lambda: second.hellos, "a hello to the restarted Batchscope", limit=10)
        sender.close()
    assert sender.connections == 2 and sender.dropped == 0
