"""Prometheus metrics of one record source, in a registry of their own (one per app).

Any RecordSource feeds them (Batchscope's engine, or another engine's records). The waiting
and running gauges are read from the source's ``counts()`` at scrape time, both from one
call, and the pending gauge from ``pending()`` (requests fired from the dashboard, not yet
handed to the engine), so /metrics shows the same numbers as the dashboard's header at every
moment (a request counts as waiting as soon as it is handed over, even while the engine is
paused). KV gauges and step counters come from each IterationRecord dict (the KV gauges add
up the latest pool of every data-parallel rank, ``source.data_parallel_rank``: each rank of a
vLLM engine has its own); per-request latencies (TTFT, inter-token, end-to-end) come from
RequestEvent dicts, so dashboard requests count as API ones do. Both
callbacks run on the producer's thread and do a handful of O(1) updates each.

Events also keep the idle pool exact: an abort applied while nothing else runs produces no
further step (so no record), but its final delta does arrive, and once no request is live
the pool is necessarily all free. ``close()`` unsubscribes (the API calls it at shutdown).
"""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from engine.record_source import RecordSource

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class EngineMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, source: RecordSource, pending: Callable[[], int] = lambda: 0):
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(QueueCollector(source, pending))
        self.kv_free = Gauge("batchscope_kv_blocks_free", "KV cache blocks with no owner", registry=r)
        self.kv_total = Gauge("batchscope_kv_blocks_total", "KV cache blocks in the pool", registry=r)
        self.iterations = Counter("batchscope_iterations", "Engine steps", registry=r)
        self.step_errors = Counter("batchscope_step_errors", "Engine steps that failed", registry=r)
        self.preemptions = Counter("batchscope_preemptions", "Requests preempted", registry=r)
        self.prompt_tokens = Counter("batchscope_prompt_tokens", "Prefill tokens computed", registry=r)
        self.generation_tokens = Counter("batchscope_generation_tokens", "Tokens sampled", registry=r)
        self.finished = Counter("batchscope_requests_finished", "Finished requests",
                                ["finish_reason"], registry=r)
        self.iteration_tokens = Histogram("batchscope_iteration_tokens", "Tokens computed per step",
                                          buckets=TOKEN_BUCKETS, registry=r)
        self.step_seconds = Histogram("batchscope_step_duration_seconds", "Wall time of one step",
                                      buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("batchscope_time_to_first_token_seconds", "Arrival to first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("batchscope_inter_token_latency_seconds", "Time between two tokens",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("batchscope_e2e_request_latency_seconds", "Arrival to finish",
                             buckets=LATENCY_BUCKETS, registry=r)
        self._pools: dict[int, tuple[int, int]] = {}  # rank -> (free, total) blocks, latest
        self._arrival: dict[str, float] = {}
        self._last_token: dict[str, float] = {}
        self._unsubscribe = [source.subscribe(self.on_record), source.subscribe_events(self.on_event)]

    def close(self) -> None:
        """Stop listening to the source (idempotent)."""
        unsubscribe, self._unsubscribe = self._unsubscribe, []
        for remove in unsubscribe:
            remove()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def on_record(self, record: dict) -> None:
        kv = record["kv"]
        self._pools[record["source"].get("data_parallel_rank", 0)] = (kv["num_free"], kv["num_blocks"])
        self._show_pools()
        self.iterations.inc()
        self.iteration_tokens.observe(record["num_rows"])
        self.step_seconds.observe(record["durations_ms"]["total"] / 1e3)
        self.generation_tokens.inc(len(record["sampled"]))
        self.prompt_tokens.inc(sum(s["num_rows"] for s in record["segments"] if s["kind"] != "decode"))
        self.preemptions.inc(len(record["preempted"]))
        if record["error"] is not None:
            self.step_errors.inc()

    def on_event(self, event: dict) -> None:
        rid, now = event["request_id"], event["time"]
        if event["kind"] == "arrival":
            self._arrival[rid] = now
            return
        arrival = self._arrival.get(rid)
        if arrival is None:  # arrived before we subscribed
            return
        if event["token_ids"]:
            previous = self._last_token.get(rid)
            if previous is None:
                self.ttft.observe(now - arrival)
            else:
                self.itl.observe((now - previous) / len(event["token_ids"]))
            self._last_token[rid] = now
        if event["finished"]:
            self.e2e.observe(now - arrival)
            self.finished.labels(event["finish_reason"] or "unknown").inc()
            del self._arrival[rid]
            self._last_token.pop(rid, None)
            if not self._arrival:
                self._pools = {rank: (total, total) for rank, (_, total) in self._pools.items()}
                self._show_pools()

    def _show_pools(self) -> None:
        self.kv_free.set(sum(free for free, _ in self._pools.values()))
        self.kv_total.set(sum(total for _, total in self._pools.values()))


class QueueCollector:
    """The waiting and running gauges, from one ``counts()`` call per scrape, and the pending
    one."""

    def __init__(self, source: RecordSource, pending: Callable[[], int]):
        self.source = source
        self.pending = pending

    def collect(self):
        yield GaugeMetricFamily("batchscope_requests_pending",
                                "Requests fired from the dashboard, not yet handed to the engine",
                                value=self.pending())
        counts = self.source.counts()
        yield GaugeMetricFamily("batchscope_requests_running", "Requests in the running batch",
                                value=counts["running"])
        yield GaugeMetricFamily("batchscope_requests_waiting",
                                "Requests handed to the engine and waiting for admission",
                                value=counts["waiting"])
