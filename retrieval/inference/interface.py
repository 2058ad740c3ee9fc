"""What embed, index and serve need of a model: the `Encoder` protocol, and how an index names the model it used.

Two encoders satisfy it: `retrieval.inference.encoder.ImageEncoder` (a PyTorch checkpoint) and
`retrieval.export.onnx_encoder.OnnxEncoder` (an ONNX export run by onnxruntime, without torch).
An index manifest records `encoder.info()`; `model_identity` reads the sha256 of the model file
from it (`checkpoint_sha256` or `onnx_sha256`), so an index is only ever searched with embeddings
of the model file that built it. Torch-free, so the ONNX path can import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from PIL import Image

__all__ = ["EmbeddedFiles", "Encoder", "model_identity"]


class EmbeddedFiles(NamedTuple):
    """The result of `Encoder.embed_files`."""

    embeddings: np.ndarray  # (M, D) float32 unit vectors of the files that could be read
    positions: np.ndarray  # (M,) int64: embeddings[i] is the file paths[positions[i]]
    failures: list[tuple[str, str]]  # (path, reason) of every file skipped, in input order


class Encoder(Protocol):
    """A model with its evaluation preprocessing: images and image files -> `(M, D)` float32 unit vectors."""

    # The source checkpoint's match threshold (`evaluate --save-threshold`), which `index build` records; or None.
    match_threshold: dict[str, Any] | None

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        ...

    def info(self) -> dict[str, Any]:
        """What an index manifest records about the model (JSON-ready; `model_identity` reads it)."""
        ...

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(M, D)` embeddings of already-decoded PIL images, in one batch."""
        ...

    def embed_files(
        self, paths: Sequence[str | Path], batch_size: int = 64, num_workers: int = 0, progress: bool = True
    ) -> EmbeddedFiles:
        """Embed image files in batches, skipping (and reporting) the ones that cannot be read."""
        ...


def model_identity(model_info: dict[str, Any]) -> str | None:
    """The sha256 of the model file recorded in `Encoder.info()` (an export's model.onnx or a checkpoint), if any.

    Example:
        >>> model_identity({"checkpoint_sha256": "ab12"}), model_identity({"onnx_sha256": "cd34"}), model_identity({})
        ('ab12', 'cd34', None)
    """
    return model_info.get("onnx_sha256") or model_info.get("checkpoint_sha256") or None
