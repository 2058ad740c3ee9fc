"""`ImageDataset`: the torch `Dataset` of image files every data source trains and embeds through.

Files are read by `retrieval.images.load_image`; what an unreadable one becomes is the loader's
policy (`retrieval.data.image_loader`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset, get_worker_info

from retrieval.data.image_loader import BadImage, BadImageLog
from retrieval.images import UnreadableImage, load_image

__all__ = ["ImageDataset"]


class ImageDataset(Dataset):
    """Images read from files with `load_image` (RGB or grayscale, transparency on white); items are `(image, label)`.

    An unreadable image raises `UserError` in the main process; in a DataLoader worker (or with
    `on_bad_image="skip"`) the item is a `BadImage` instead, which `ImageLoader` raises as one line
    in the main process or leaves out (see `retrieval.data.image_loader`).

    Args:
        paths: image files.
        labels: `(N,)` class indices, or `(N, C)` bool multi-hot rows (an item's label is then a
            `(C,)` bool tensor, batched to `(B, C)`).
        transform: applied to each PIL image (`retrieval.data.transforms`; it converts to the model's channels).
        on_bad_image: `fail` or `skip` (`data.on_bad_image`), or a `BadImageLog` (e.g. a quiet one whose
            caller reports the skipped images itself).
    """

    def __init__(
        self,
        paths: list[Path],
        labels: np.ndarray,
        transform: Callable[[Image.Image], Tensor],
        on_bad_image: str | BadImageLog = "fail",
    ) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"{len(paths)} paths but {len(labels)} labels")
        self.paths = paths
        self.labels = labels
        self.transform = transform
        self.bad_images = on_bad_image if isinstance(on_bad_image, BadImageLog) else BadImageLog(on_bad_image)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, int | Tensor] | BadImage:
        try:
            image = load_image(self.paths[index])
        except UnreadableImage as exc:
            bad = BadImage(index, str(exc), exc.path, exc.reason)
            if self.bad_images.policy == "fail" and get_worker_info() is None:
                self.bad_images.handle(bad)  # raises; a worker hands `bad` to ImageLoader instead
            return bad
        label = self.labels[index]
        return self.transform(image), torch.from_numpy(label) if label.ndim else int(label)
