"""The room benchmark's summary (benchmarks/room_summary.py) on made-up measurements: what it
computes, never how fast anything was (the benchmark itself is run by hand)."""
import pytest

from benchmarks.room_summary import (
    MANY,
    ONE,
    Click,
    FrameRates,
    Window,
    alternating_ratios,
    fired_ids,
    first_token_spread,
    first_token_times,
    first_tokens_by_kind,
    frame_rates,
    lag_percentiles,
    metric_value,
    per_second_counts,
    rates_by_kind,
    summarize,
    table,
)
from viz.ui.strings import PAGE


def windows(*steps_per_10s: float) -> list[Window]:
    """Alternating 10-second windows 1, N, 1, N, ... with these step counts."""
    return [Window(ONE if i % 2 == 0 else MANY, 10.0 * i, 10.0 * (i + 1), steps, steps * 4)
            for i, steps in enumerate(steps_per_10s)]


def test_each_n_window_is_compared_with_the_one_viewer_windows_around_it():
    measured = windows(100, 90, 120, 99, 100)  # N windows: 90 vs (100+120)/2, 99 vs (120+100)/2
    ratio = alternating_ratios(measured, "steps")
    assert ratio.low == pytest.approx(90 / 110) and ratio.high == pytest.approx(0.9)
    assert ratio.median == pytest.approx((90 / 110 + 0.9) / 2)
    assert alternating_ratios(measured, "tokens").median == pytest.approx(ratio.median)
    by_kind = rates_by_kind(measured, "steps")
    assert by_kind[ONE].median == pytest.approx(10.0) and by_kind[MANY].low == pytest.approx(9.0)


def test_an_n_window_at_the_end_has_one_neighbour_and_none_without_one_viewer_windows():
    assert alternating_ratios(windows(100, 50), "steps").median == pytest.approx(0.5)
    assert alternating_ratios([Window(MANY, 0, 10, 5, 5)], "steps") is None


def test_lag_percentiles_are_in_milliseconds():
    lags = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    found = lag_percentiles(lags)
    assert found["n"] == 100
    assert found["p50_ms"] == pytest.approx(50.5) and found["p99_ms"] == pytest.approx(99.01)
    assert lag_percentiles([]) == {"n": 0, "p50_ms": None, "p99_ms": None}


def test_frames_are_counted_per_whole_second_of_the_window():
    times = [100.1, 100.5, 101.2, 103.9, 104.5, 99.9]  # before and after the window are left out
    assert per_second_counts(times, 100.0, 104.4) == [2, 1, 0, 1]


def test_frame_rates_find_the_starved_viewers():
    rates = frame_rates([[25, 24, 26], [25, 0, 25], [1, 2, 3]])
    assert rates == FrameRates(viewers=3, viewer_seconds=9, min=0, median=24, max=26, empty_seconds=1,
                               starved_viewers=1)
    assert frame_rates([]) is None


def test_first_token_spread_is_over_each_visitors_median():
    clicks = [Click(0, 10.0, "q1"), Click(0, 20.0, "q3"), Click(1, 10.0, "q5"), Click(2, 10.0, "q7"),
              Click(2, 11.0, None, refused="Not fired: cap"), Click(3, 12.0, "q9")]  # q9: never seen
    first = {"q1": 11.0, "q3": 23.0, "q5": 12.0, "q7": 14.0}
    per_firer = first_token_times(clicks, first)
    assert per_firer == {0: [1.0, 3.0], 1: [2.0], 2: [4.0]}
    spread = first_token_spread(per_firer)
    assert (spread.visitors, spread.clicks, spread.median_s, spread.max_s) == (3, 4, 2.0, 4.0)
    assert spread.max_over_median == pytest.approx(2.0)
    assert first_token_spread({}) is None


def test_clicks_are_grouped_by_the_window_they_were_made_in():
    measured = windows(100, 100)  # 1 viewer in [0, 10), N in [10, 20)
    clicks = [Click(0, 5.0, "a"), Click(1, 15.0, "b"), Click(1, 25.0, "c")]
    found = first_tokens_by_kind(clicks, measured, {"a": 6.0, "b": 18.0, "c": 26.0})
    assert found[ONE]["median_s"] == 1.0 and found[MANY]["median_s"] == 3.0 and found["all"]["clicks"] == 3


def test_the_fire_answer_and_the_metrics_are_parsed():
    assert fired_ids("Fired 2: q12, q13 · 已发射 2 个：q12, q13") == ["q12", "q13"]
    assert fired_ids("Not fired: one visitor may have 8 · 未发射") == []
    # The page's answer as Gradio returns it: each language between invisible marks.
    assert fired_ids(PAGE.both("fired", count=2, ids="q3, q4")) == ["q3", "q4"]
    text = "# HELP x\nbatchscope_iterations_total 12.0\nbatchscope_iterations_created 1.7e9\n"
    assert metric_value(text, "batchscope_iterations_total") == 12.0
    assert metric_value(text, "batchscope_generation_tokens_total") == 0.0


def test_the_summary_and_its_table():
    measured = windows(100, 90, 100)
    frames = {"frames_per_s": {"viewers": 2, "viewer_seconds": 20, "min": 3, "median": 25, "max": 26,
                               "empty_seconds": 0, "starved_viewers": 0},
              "lag": {"n": 5, "p50_ms": 30.0, "p99_ms": 80.0}, "resyncs": 0}
    viewers = {"kinds": {ONE: frames, MANY: frames}, "first_tokens": {"q1": 16.0}}
    summary = summarize(measured, viewers, [Click(0, 15.0, "q1"), Click(0, 16.0, None, "Not fired")])
    assert summary["ratios"]["steps"]["median"] == pytest.approx(0.9)
    assert summary["clicks"] == {"clicks": 2, "fired": 1, "refused": 1, "first_token_unseen": 0}
    text = table(summary, 500)
    assert "| engine steps/s (/metrics) | 10.0 | 9.0 | 0.900 (0.900-0.900) |" in text
    assert "| record-to-viewer lag p50 / p99, ms | 30 / 80 | 30 / 80 | |" in text


def test_the_client_parses_each_distinct_message_once():
    """The viewers share one message's bytes: the client parses them once (its CPU is the
    host's, not the browsers'), and different bytes are parsed on their own."""
    import zlib

    from benchmarks.room_client import Parsed

    def deflated(text: str) -> bytes:
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return packer.compress(text.encode()) + packer.flush()

    parsed = Parsed()
    shared = deflated('{"type": "frame", "records": [{"t_end": 1.5}]}')
    first, again = parsed(shared), parsed(bytes(shared))
    assert first is again and first["records"][0]["t_end"] == 1.5
    assert parsed('{"type": "snapshot"}') == {"type": "snapshot"}
    assert parsed(deflated('{"type": "frame", "records": []}')) is not first


def test_the_soak_verdict_compares_the_end_with_the_end_of_the_warm_up():
    from benchmarks.soak import Sample, SoakSetting, verdict

    def at(minute: int, rss: float, threads: int = 9, kv_free: int = 8) -> Sample:
        return Sample(minute, float(minute), rss, threads, 11, kv_free, 8, 10 * minute, "solo check", "same as alone")

    samples = [Sample(0, 0.0, 1400, 4, 11, 0, 0, 0, "start", ""), at(1, 2400), at(2, 2600), at(3, 2700), at(4, 2850)]
    v = verdict(SoakSetting(warmup_minutes=2, bound_mib=300), samples)
    assert (v["rss_start_mib"], v["rss_end_mib"], v["rss_growth_mib"]) == (2600, 2850, 250)
    assert v["rss_within_bound"] and v["rss_peak_mib"] == 2850 and v["threads"] == [9, 9]
    assert v["kv_all_free_at_every_sample"]  # minute 0 is before the first step: no pool yet
    worse = verdict(SoakSetting(warmup_minutes=2, bound_mib=200), [*samples[:-1], at(4, 2850, threads=12, kv_free=7)])
    assert not worse["rss_within_bound"] and worse["threads"] == [9, 12] and not worse["kv_all_free_at_every_sample"]


def test_the_join_line_says_how_long_the_room_took_to_connect_and_what_the_engine_made():
    from benchmarks.room import join_line
    from benchmarks.room_summary import JOIN

    joins = [Window(JOIN, 0.0, 10.0, 5, 100), Window(JOIN, 20.0, 24.0, 4, 80)]
    summary = summarize(windows(100, 90, 100), {"kinds": {}, "first_tokens": {}}, [])
    line = join_line(joins, summary, 500)
    assert "500 viewers connected, each with its snapshot, in 7.0 s (median, 4.0-10.0)" in line
    assert "15 tok/s meanwhile (0.38x the one-viewer windows)" in line  # 40 tok/s with one viewer
