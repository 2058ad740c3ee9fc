"""What embed, index and serve need of a model: the `Encoder` protocol, and how an index names the model it used.

Two encoders satisfy it: `retrieval.inference.image_encoder.ImageEncoder` (a PyTorch checkpoint) and
`retrieval.export.onnx_encoder.OnnxEncoder` (an ONNX export run by onnxruntime, without torch).
An index manifest records `encoder.info()` (a `ModelInfo`); its `identity` is the sha256 of
the model file (`onnx_sha256`, else `checkpoint_sha256`), so an index is only ever searched
with embeddings of the model file that built it. Torch-free, so the ONNX path can import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from PIL import Image
from pydantic import ConfigDict, Field, JsonValue, ValidationError

from retrieval.core.match_threshold import MatchThreshold
from retrieval.validation import Record, user_error

__all__ = ["EmbeddedFiles", "Encoder", "ModelInfo"]


class EmbeddedFiles(NamedTuple):
    """The result of `Encoder.embed_files`."""

    embeddings: np.ndarray  # (M, D) float32 unit vectors of the files that could be read
    positions: np.ndarray  # (M,) int64: embeddings[i] is the file paths[positions[i]]
    failures: list[tuple[str, str]]  # (path, reason) of every file skipped, in input order


class Encoder(Protocol):
    """A model with its evaluation preprocessing: images and image files -> `(M, D)` float32 unit vectors."""

    # The source checkpoint's match threshold (`evaluate --save-threshold`), which `index build` records; or None.
    match_threshold: MatchThreshold | None

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        ...

    def info(self) -> ModelInfo:
        """What an index manifest records about the model (`ModelInfo.record()` is its JSON)."""
        ...

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(M, D)` embeddings of already-decoded PIL images, in one batch."""
        ...

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """The size its evaluation resize gives a `width` x `height` image, before the crop or pad.

        What preprocessing one image costs, known from the header alone (`retrieval.core.eval_sizes`).
        """
        ...

    def embed_files(
        self, paths: Sequence[str | Path], batch_size: int = 64, num_workers: int = 0, progress: bool = True
    ) -> EmbeddedFiles:
        """Embed image files in batches, skipping (and reporting) the ones that cannot be read."""
        ...


class ModelInfo(Record):
    """What an index manifest records about the model that embedded it (its `model` entry, `Encoder.info()`).

    A checkpoint's encoder records its path, sha256, model config, image size and transform (and
    `backbone_config` for a backbone without training); an export's, its directory and model.onnx's
    sha256; an index of embedding files, only the checkpoint's sha256. Keys of other versions are kept.
    The model config, transform and backbone config are copies of the checkpoint's own records, kept
    as JSON here and validated by their owners (`retrieval.config`) where a model is rebuilt from them.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    checkpoint: str | None = None  # the checkpoint file
    checkpoint_sha256: str | None = None
    model_dir: str | None = None  # the export directory
    onnx_sha256: str | None = None  # its model.onnx
    source_checkpoint_sha256: str | None = None  # the checkpoint an export was made from
    model_settings: dict[str, JsonValue] | None = Field(
        default=None, validation_alias="model_config", serialization_alias="model_config"
    )  # `ModelConfig`, as dicts
    embedding_dim: int | None = None
    image_size: int | None = None
    transform: dict[str, JsonValue] | None = None  # the evaluation transform
    backbone_config: dict[str, JsonValue] | None = None  # the run config of a backbone without training

    @classmethod
    def read(cls, record: ModelInfo | Mapping[str, Any]) -> ModelInfo:
        """The `model` entry of a manifest, checked (one already read is returned as it is).

        Raises:
            UserError: a key holds a value of the wrong type (a damaged manifest), naming it.
        """
        if isinstance(record, ModelInfo):
            return record
        try:
            return cls.model_validate(dict(record))
        except ValidationError as exc:
            raise user_error(
                cls, exc, "the index's model record", "the manifest is damaged: rebuild the index"
            ) from None

    @property
    def identity(self) -> str | None:
        """The sha256 of the model file (an export's model.onnx or a checkpoint), if any."""
        return self.onnx_sha256 or self.checkpoint_sha256 or None

    @property
    def trained_checkpoint(self) -> str | None:
        """The sha256 of the checkpoint whose weights embed, directly or through an export of it, if any."""
        return self.checkpoint_sha256 or self.source_checkpoint_sha256 or None

    def record(self) -> dict[str, JsonValue]:
        """JSON-ready, with the keys it was given (the manifest's layout)."""
        return self.model_dump(by_alias=True, exclude_unset=True)
