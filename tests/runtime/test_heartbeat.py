"""`Heartbeat`: a progress line every interval inside an epoch, none before, the loss read only when printed."""

from __future__ import annotations

import logging

from retrieval.runtime.heartbeat import Heartbeat, duration_text, with_progress


def test_a_line_comes_once_an_interval_has_passed_and_estimates_what_is_left(caplog) -> None:
    now = [100.0]
    reads = []

    def loss() -> float:
        reads.append(1)
        return 0.81234

    heartbeat = Heartbeat("epoch 3/60", total=560, interval=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="retrieval.runtime.heartbeat"):
        now[0] = 129.0
        heartbeat.beat(100, loss)  # 29 s: not yet
        now[0] = 165.0
        heartbeat.beat(120, loss)  # 65 s
        now[0] = 170.0
        heartbeat.beat(130, loss)  # 5 s after the last line: not yet
    assert [record.getMessage() for record in caplog.records] == [
        "epoch 3/60: batch 120/560 (21%), loss 0.8123, 1m05s so far, about 3m58s left"
    ]
    assert len(reads) == 1  # a GPU loss is read back only for a line


def test_durations_read_at_a_glance() -> None:
    assert [duration_text(s) for s in (0.4, 42, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


def test_a_pass_without_a_loss_leaves_it_out(caplog) -> None:
    now = [0.0]
    heartbeat = Heartbeat("embed", total=40, interval=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="retrieval.runtime.heartbeat"):
        now[0] = 30.0
        heartbeat.beat(10)
    assert caplog.messages == ["embed: batch 10/40 (25%), 30s so far, about 1m30s left"]


def test_with_progress_logs_where_no_bar_shows_and_yields_every_item(caplog, monkeypatch) -> None:
    """Standard error is no terminal under pytest, as in a log: lines instead of a bar (every item at 0 s)."""
    monkeypatch.setattr("retrieval.runtime.heartbeat.HEARTBEAT_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="retrieval.runtime.heartbeat"):
        assert list(with_progress(range(3), "embed")) == [0, 1, 2]
        assert list(with_progress(range(3), "embed", shown=False)) == [0, 1, 2]
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(",")[0] for line in lines] == [
        "embed: batch 1/3 (33%)",
        "embed: batch 2/3 (66%)",
        "embed: batch 3/3 (100%)",
    ]
