"""A DataLoader for image files that turns an unreadable image into one clear line, or skips it.

`data.on_bad_image` chooses what a missing, truncated or corrupt image does:

- `fail` (default): the run stops with `error: cannot read image PATH: ...`. Raised inside a
  DataLoader worker, an exception would reach the main process wrapped in the worker's traceback;
  so a worker hands the failure over as a `BadImage` item instead, and `ImageLoader` raises it in
  the main process as a one-line `UserError`.
- `skip`: the image is left out of its batch. Each path is logged once (per dataset, for the
  whole run) and the number skipped is reported at the end of every pass over the data (epoch,
  evaluation). A batch whose images are all unreadable is not yielded at all.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset, default_collate
from tqdm import tqdm

from retrieval.errors import UserError

__all__ = ["BAD_IMAGE_POLICIES", "BadImage", "BadImageLog", "ImageLoader", "collate_images"]

# What to do with an unreadable image, the choices of `data.on_bad_image` (the config lists the same; a test checks).
BAD_IMAGE_POLICIES = ("fail", "skip")


class BadImage(NamedTuple):
    """What a dataset returns instead of `(image, label)` for an image it cannot read."""

    position: int  # index of the item in the dataset
    message: str  # one line: "cannot read image PATH: REASON; ..."
    path: str
    reason: str  # the REASON part alone, e.g. "UnidentifiedImageError: cannot identify image file ..."


class BadImageLog:
    """A dataset's bad-image policy and the paths already logged (kept in the main process).

    Args:
        policy: `fail` or `skip` (`data.on_bad_image`).
        announce: under `skip`, log each skipped path and each pass's count on stderr; off for
            callers that report the skipped images themselves (`retrieval embed`, `index build`).
    """

    def __init__(self, policy: str = "fail", announce: bool = True) -> None:
        if policy not in BAD_IMAGE_POLICIES:
            raise UserError(f"data.on_bad_image must be one of {', '.join(BAD_IMAGE_POLICIES)}, got {policy!r}")
        self.policy = policy
        self.announce = announce
        self.logged: set[str] = set()

    def handle(self, bad: BadImage) -> None:
        """Raise `bad` as a `UserError` (`fail`), or log its path the first time it is seen (`skip`)."""
        if self.policy == "fail":
            raise UserError(f"{bad.message} (or set data.on_bad_image=skip to leave unreadable images out)")
        if self.announce and bad.path not in self.logged:
            self.logged.add(bad.path)
            tqdm.write(f"skipping unreadable image: {bad.message}", file=sys.stderr)


class _Batch(NamedTuple):
    images: Any  # collated images of the readable items, None when there are none
    labels: Any
    bad: tuple[BadImage, ...]


def collate_images(items: list[tuple[Tensor, int] | BadImage]) -> _Batch:
    """`default_collate` of the readable items, with the `BadImage` items set aside (runs in the worker)."""
    bad = tuple(item for item in items if isinstance(item, BadImage))
    good = [item for item in items if not isinstance(item, BadImage)]
    if not good:
        return _Batch(None, None, bad)
    images, labels = default_collate(good)
    return _Batch(images, labels, bad)


class ImageLoader(DataLoader):
    """A `DataLoader` whose batches are `(images, labels)` and that applies the dataset's bad-image policy.

    Takes `DataLoader`'s keyword arguments (not `collate_fn`). The policy is the dataset's `bad_images`
    (`BadImageLog`), looked up under `Subset`s (a torchrun shard); a dataset without one (in-memory
    digits) never yields a `BadImage`.
    After (or during) a pass, `skipped` holds the images left out in that pass and `skipped_indices`
    their dataset positions, so an in-order evaluation knows which rows its embeddings lack.
    """

    def __init__(self, dataset: Dataset, **kwargs: Any) -> None:
        super().__init__(dataset, collate_fn=collate_images, **kwargs)
        self.skipped: list[BadImage] = []

    @property
    def skipped_indices(self) -> list[int]:
        """Dataset positions of the images left out in the current (or last) pass, in order."""
        return [bad.position for bad in self.skipped]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:  # type: ignore[override]
        log = _bad_image_log(self.dataset)
        self.skipped = []
        for batch in super().__iter__():
            for bad in batch.bad:
                log.handle(bad)
                self.skipped.append(bad)
            if batch.images is not None:
                yield batch.images, batch.labels
        if self.skipped and log.announce:
            tqdm.write(
                f"skipped {len(self.skipped)} unreadable image(s) in this pass (data.on_bad_image=skip)",
                file=sys.stderr,
            )


def _bad_image_log(dataset: Dataset) -> BadImageLog:
    """The policy of the dataset under any `Subset`s (a torchrun rank's shard is one)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return getattr(dataset, "bad_images", None) or BadImageLog()
