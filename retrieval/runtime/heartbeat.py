"""`Heartbeat`: a plain progress line inside a long epoch or embedding pass, where no progress bar shows.

tqdm draws its bar only on a terminal; under nohup, a batch scheduler or CI (standard error not a
terminal) an epoch of a large dataset, or the embedding of a large gallery, is silent for hours. A
line every `HEARTBEAT_SECONDS` keeps such a log alive at a bounded volume whatever a step costs
(steps range from milliseconds on the digits demo to seconds on a large backbone, so a count of
steps would either flood or starve it); passes shorter than the interval print nothing but their
summary line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from tqdm import tqdm

__all__ = ["HEARTBEAT_SECONDS", "Counted", "Heartbeat", "Progress", "duration_text", "with_progress"]

_Item = TypeVar("_Item", covariant=True)


class Counted(Protocol[_Item]):
    """What `with_progress` walks: items with a length (a list, a range, a `DataLoader`)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[_Item]: ...


HEARTBEAT_SECONDS = 30.0

_log = logging.getLogger(__name__)


class Heartbeat:
    """Logs (INFO) `epoch 3/60: batch 120/560 (21%), loss 0.8123, 1m05s so far, about 3m58s left` every `interval` s.

    Args:
        description: what is counted, e.g. `epoch 3/60`.
        total: batches in the epoch.
        interval: seconds between lines; the first comes one interval after the start.
        clock: seconds, monotonic (a fake one in tests).
    """

    def __init__(
        self,
        description: str,
        total: int,
        interval: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description, self.total, self.interval, self.clock = description, total, interval, clock
        self.started = self.last = clock()

    def beat(self, done: int, loss: Callable[[], float] | None = None) -> None:
        """After `done` batches: log a line if `interval` has passed since the last; `loss` is read only then.

        Without `loss` (an embedding pass has none), the line leaves it out.
        """
        now = self.clock()
        if now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.started
        left = elapsed * (self.total - done) / max(done, 1)
        shown = "" if loss is None else f", loss {loss():.4f}"
        _log.info(
            "%s: batch %d/%d (%d%%)%s, %s so far, about %s left",
            self.description,
            done,
            self.total,
            100 * done // max(self.total, 1),
            shown,
            duration_text(elapsed),
            duration_text(left),
        )


class Progress(Generic[_Item]):
    """`items` in order, with a bar on a terminal, else (a log) a `Heartbeat` line every `HEARTBEAT_SECONDS`.

    `shown=False` draws and logs nothing (a quiet caller, or a torchrun rank other than the first).
    `loss`: read for each heartbeat line (an epoch's running loss); `show_loss` puts a value on the bar.
    """

    def __init__(
        self, items: Counted[_Item], description: str, shown: bool = True, loss: Callable[[], float] | None = None
    ) -> None:
        self.bar = tqdm(items, desc=description, leave=False, disable=None if shown else True)
        self.pulse = Heartbeat(description, len(items), HEARTBEAT_SECONDS) if shown and self.bar.disable else None
        self.loss = loss

    def __iter__(self) -> Iterator[_Item]:
        for done, item in enumerate(self.bar, start=1):
            yield item
            if self.pulse is not None:
                self.pulse.beat(done, self.loss)

    def show_loss(self, value: float) -> None:
        """Show `value` as the bar's loss (nothing without a bar)."""
        self.bar.set_postfix(loss=f"{value:.4f}")


def with_progress(items: Counted[_Item], description: str, shown: bool = True) -> Iterator[_Item]:
    """`items` in order with a `Progress` bar or heartbeat (`shown=False`: neither)."""
    return iter(Progress(items, description, shown))


def duration_text(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
