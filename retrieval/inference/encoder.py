"""Images to embeddings with a trained checkpoint: the one model + preprocessing that index, query and serve share.

An index is only meaningful with the exact model and preprocessing that embedded its gallery, so
the encoder records the checkpoint's sha256, its model config and a description of the transform
(`info()`), and `encoder_for_index` refuses a checkpoint other than the one an index was built with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from retrieval.checkpoint import Checkpoint
from retrieval.config import AugmentConfig
from retrieval.data import flatten_image
from retrieval.data.transforms import build_eval_transform, describe_eval_transform
from retrieval.errors import UserError
from retrieval.models import Embedder
from retrieval.runtime.device import resolve_device
from retrieval.runtime.files import file_sha256

__all__ = ["EmbeddedFiles", "ImageEncoder", "encoder_for_index", "read_image_failure"]

# What Pillow raises for a file that is not an image, is truncated, or decodes to too many pixels.
_IMAGE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


class EmbeddedFiles(NamedTuple):
    """The result of `ImageEncoder.embed_files`."""

    embeddings: np.ndarray  # (M, D) float32 unit vectors of the files that could be read
    positions: np.ndarray  # (M,) int64: embeddings[i] is the file paths[positions[i]]
    failures: list[tuple[str, str]]  # (path, reason) of every file skipped, in input order


class ImageEncoder:
    """A trained `Embedder` in eval mode with its evaluation preprocessing.

    Build one with `ImageEncoder.from_checkpoint`; `embed_files` and `embed_images` return
    `(M, D)` float32 unit vectors, computed in float32 (the same numbers on every device type
    up to rounding, so an index built on a GPU can be queried on a CPU).
    """

    def __init__(
        self,
        model: Embedder,
        image_size: int,
        augment: AugmentConfig,
        device: torch.device,
        checkpoint_path: Path,
        checkpoint_sha256: str,
        model_config: dict[str, Any],
    ) -> None:
        self.model = model.to(device).eval()
        self.image_size = image_size
        self.device = device
        self.checkpoint_path = checkpoint_path
        self.checkpoint_sha256 = checkpoint_sha256
        self.model_config = model_config
        # The run's own evaluation preprocessing (augment.eval_mode, channels), so queries match the gallery.
        stats, in_chans = model.data_config(), int(model_config.get("in_chans", 3))
        self._transform = build_eval_transform(augment, image_size, stats, in_chans)
        self.transform = describe_eval_transform(augment, image_size, stats, in_chans)  # recorded by `info()`

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "auto") -> ImageEncoder:
        """Load a `retrieval train` checkpoint; architecture, image size and eval transform are the run's own."""
        path = Path(path)
        checkpoint = Checkpoint.load(path)
        model = checkpoint.embedder()
        model_config = {**dataclasses.asdict(checkpoint.model_config), "pretrained": False, "weights": None}
        config = checkpoint.config()
        return cls(
            model,
            config.data.image_size,
            config.augment,
            resolve_device(device),
            path.resolve(),
            file_sha256(path),
            model_config,
        )

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return int(self.model.embedding_dim)

    def info(self) -> dict[str, Any]:
        """What the index manifest records about the model that embedded it (JSON-ready)."""
        return {
            "checkpoint": str(self.checkpoint_path),
            "checkpoint_sha256": self.checkpoint_sha256,
            "model_config": self.model_config,
            "embedding_dim": self.dim,
            "image_size": self.image_size,
            "transform": self.transform,
        }

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """A PIL image -> the model's `(C, H, W)` float input; the one place where that happens."""
        return self._transform(flatten_image(image))

    @torch.no_grad()
    def embed_tensors(self, batch: torch.Tensor) -> np.ndarray:
        """`(B, C, H, W)` preprocessed images -> `(B, D)` float32 unit vectors."""
        return self.model(batch.to(self.device)).float().cpu().numpy()

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(M, D)` embeddings of already-decoded PIL images, in one batch."""
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.embed_tensors(torch.stack([self.preprocess(image) for image in images]))

    def embed_files(
        self, paths: Sequence[str | Path], batch_size: int = 64, num_workers: int = 0, progress: bool = True
    ) -> EmbeddedFiles:
        """Embed image files in batches, skipping (and reporting) the ones that cannot be read.

        One bad file in a long build is reported in `failures` and left out; it never aborts the
        run. `num_workers` DataLoader processes decode images in parallel with the model.
        """
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}")
        loader = DataLoader(
            _ImageFiles(list(paths), self.preprocess),
            batch_size=batch_size,
            num_workers=num_workers if len(paths) > batch_size else 0,  # one batch: workers only add start-up
            collate_fn=_collate_readable,
        )
        chunks, positions, failures = [], [], []
        bar = tqdm(total=len(paths), desc="embed", unit="img", disable=not progress or None)
        for tensors, ok, failed in loader:
            if ok:
                chunks.append(self.embed_tensors(torch.stack(tensors)))
                positions.extend(ok)
            failures.extend((str(paths[position]), reason) for position, reason in failed)
            bar.update(len(ok) + len(failed))
        bar.close()
        embeddings = np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)
        return EmbeddedFiles(embeddings, np.asarray(positions, dtype=np.int64), failures)


def read_image_failure(exc: BaseException) -> str:
    """A short reason for an image that cannot be read, e.g. `UnidentifiedImageError: cannot identify ...`."""
    message = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{exc.__class__.__name__}: {message}" if message else exc.__class__.__name__


class _ImageFiles(Dataset):
    """Items are `(position, tensor or None, failure reason or None)`: unreadable files become failures."""

    def __init__(self, paths: list[str | Path], preprocess) -> None:
        self.paths = paths
        self.preprocess = preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, position: int) -> tuple[int, torch.Tensor | None, str | None]:
        try:
            with Image.open(self.paths[position]) as image:
                return position, self.preprocess(image), None
        except _IMAGE_ERRORS as exc:
            return position, None, read_image_failure(exc)


def _collate_readable(items: list[tuple[int, torch.Tensor | None, str | None]]):
    tensors = [tensor for _, tensor, _ in items if tensor is not None]
    ok = [position for position, tensor, _ in items if tensor is not None]
    failed = [(position, reason) for position, tensor, reason in items if tensor is None]
    return tensors, ok, failed


def encoder_for_index(
    model_info: dict[str, Any], checkpoint: str | Path | None = None, device: str = "auto"
) -> ImageEncoder:
    """The encoder an index was built with: its recorded checkpoint, or `checkpoint` if it is the same file.

    Raises:
        UserError: the checkpoint is missing, or its sha256 is not the one the index recorded
            (embeddings of another model are not comparable with the index's).
    """
    recorded = model_info.get("checkpoint_sha256")
    if not recorded:
        raise UserError("the index records no checkpoint (built from raw embeddings); images cannot be embedded for it")
    path = Path(checkpoint) if checkpoint is not None else Path(model_info["checkpoint"])
    if not path.is_file():
        how = "pass it" if checkpoint is not None else "pass the checkpoint the index was built with"
        raise UserError(f"checkpoint not found: {path}; {how} with --checkpoint CKPT")
    actual = file_sha256(path)
    if actual != recorded:
        raise UserError(
            f"checkpoint {path} is not the one this index was built with (sha256 {actual[:12]}... != "
            f"{recorded[:12]}...); pass the original with --checkpoint or rebuild the index"
        )
    return ImageEncoder.from_checkpoint(path, device=device)
