"""Images to embeddings with a trained checkpoint: the one model + preprocessing of embed, index, query and serve.

An index is only meaningful with the exact model and preprocessing that embedded its gallery, so
the encoder records the checkpoint's sha256, its model config and a description of the transform
(`info()`), and `checkpoint_encoder_for_index` refuses a checkpoint other than the one an index was built
with (`retrieval.export.index_encoder.encoder_for_index` chooses between it and an ONNX export's encoder).
An encoder of a timm backbone without training (`ImageEncoder.from_backbone`) has no file: it
records the config it was built from and the checksum of its weights, and is rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from pydantic import JsonValue

from retrieval.checkpoint import Checkpoint, state_checksum
from retrieval.config import AugmentConfig, Config, ModelConfig, config_from_dict, config_to_dict
from retrieval.core.match_threshold import MatchThreshold
from retrieval.data.image_dataset import ImageDataset
from retrieval.data.image_loader import BadImageLog, ImageLoader
from retrieval.data.transforms import build_eval_transform, describe_eval_transform
from retrieval.errors import UserError
from retrieval.images import flatten_image
from retrieval.inference.backbone import backbone_checkpoint
from retrieval.inference.forward import FLOAT32, Precision, embed_batch, embed_loader
from retrieval.inference.interface import EmbeddedFiles, ModelInfo
from retrieval.models import Embedder
from retrieval.runtime.device import place_model, resolve_device
from retrieval.runtime.files import file_sha256

__all__ = ["EmbeddedFiles", "ImageEncoder", "checkpoint_encoder_for_index"]


class ImageEncoder:
    """A trained `Embedder` in eval mode with its evaluation preprocessing and precision.

    Build one with `ImageEncoder.from_checkpoint`; `embed_files` and `embed_images` return
    `(M, D)` float32 unit vectors. Files are read with `retrieval.data.load_image` by an
    `ImageDataset`, and every batch goes through `retrieval.inference.forward.embed_batch`: the
    reading, transform, autocast and memory format of evaluation.

    Precision: the run's `train.amp` and `train.channels_last` resolved for the device
    (`Precision.for_run`), exactly as `retrieval evaluate` does, so the embeddings an index
    stores are the ones evaluation scored on that device. On the CPU that is float32 whatever
    the run trained with (unless it asked for `train.amp: bf16` explicitly); on a GPU `auto` is
    bf16, whose embeddings differ from float32 ones by rounding only, so an index built on a GPU
    can still be queried on a CPU.
    """

    def __init__(
        self,
        model: Embedder,
        model_config: ModelConfig,
        image_size: int,
        augment: AugmentConfig,
        device: torch.device,
        precision: Precision = FLOAT32,
        checkpoint_path: Path | None = None,
        checkpoint_sha256: str = "",
        match_threshold: MatchThreshold | None = None,
        backbone_config: dict[str, JsonValue] | None = None,
    ) -> None:
        self.model = model.eval()
        place_model(model, device, precision.channels_last)  # moves the module in place
        self.model_config = model_config
        self.image_size = image_size
        self.device = device
        self.precision = precision
        self.checkpoint_path = checkpoint_path
        self.checkpoint_sha256 = checkpoint_sha256
        self.match_threshold = match_threshold  # the checkpoint's, which `index build` records in the manifest
        self.backbone_config = backbone_config  # the config of a backbone without training: how to rebuild it
        # The run's own evaluation preprocessing (augment.eval_mode, channels), so queries match the gallery.
        stats, in_chans = model.data_config(), model_config.in_chans
        self.transform = build_eval_transform(augment, image_size, stats, in_chans)
        self.transform_record = describe_eval_transform(augment, image_size, stats, in_chans)  # recorded by `info()`

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "auto", sha256: str | None = None) -> ImageEncoder:
        """Load a `retrieval train` checkpoint; architecture, image size, eval transform and precision are the run's.

        `sha256` is the file's, when the caller has already hashed it (a checkpoint can be large).
        """
        return cls.from_loaded(Checkpoint.read(path), path, device, sha256)

    @classmethod
    def from_loaded(
        cls, checkpoint: Checkpoint, path: str | Path, device: str = "auto", sha256: str | None = None
    ) -> ImageEncoder:
        """`from_checkpoint` for a `Checkpoint` already loaded from `path` (read once by callers that need it too)."""
        path = Path(path)
        return cls._of(checkpoint, checkpoint.config(), device, path.resolve(), sha256 or file_sha256(path))

    @classmethod
    def from_backbone(cls, config: Config, device: str = "auto") -> ImageEncoder:
        """The timm backbone of `config.model` without training (`retrieval.inference.backbone.backbone_config`).

        Its `checkpoint_sha256` is the checksum of its weights (`state_checksum`): there is no file.
        """
        checkpoint = backbone_checkpoint(config)
        return cls._of(checkpoint, config, device, None, state_checksum(checkpoint.model), config_to_dict(config))

    @classmethod
    def _of(
        cls,
        checkpoint: Checkpoint,
        config: Config,
        device: str,
        path: Path | None,
        sha256: str,
        backbone_config: dict[str, JsonValue] | None = None,
    ) -> ImageEncoder:
        """The encoder of `checkpoint` with the image size, eval transform and precision of run `config`."""
        where = resolve_device(device)
        return cls(
            checkpoint.embedder(),
            checkpoint.model_config.model_copy(update={"pretrained": False, "weights": None}),
            config.data.image_size,
            config.augment,
            where,
            Precision.for_run(config.train, where),
            path,
            sha256,
            checkpoint.match_threshold,
            backbone_config,
        )

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return int(self.model.embedding_dim)

    def info(self) -> ModelInfo:
        """What the index manifest records about the model that embedded it."""
        info = ModelInfo(
            checkpoint=None if self.checkpoint_path is None else str(self.checkpoint_path),
            checkpoint_sha256=self.checkpoint_sha256,
            model_settings=self.model_config.model_dump(),
            embedding_dim=self.dim,
            image_size=self.image_size,
            transform=self.transform_record.to_dict(),
        )
        if self.backbone_config is not None:
            info.backbone_config = self.backbone_config
        return info

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """A decoded PIL image -> the model's `(C, H, W)` float input, as `load_image` + the eval transform give it."""
        return self.transform(flatten_image(image))

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """The size its eval transform resizes a `width` x `height` image to, before the crop or pad."""
        return self.transform_record.resized_size(width, height)

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(M, D)` embeddings of already-decoded PIL images, in one batch."""
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch = torch.stack([self.preprocess(image) for image in images])
        return embed_batch(self.model, batch, self.device, self.precision).cpu().numpy()

    def embed_files(
        self, paths: Sequence[str | Path], batch_size: int = 64, num_workers: int = 0, progress: bool = True
    ) -> EmbeddedFiles:
        """Embed image files in batches, skipping (and reporting) the ones that cannot be read.

        One bad file in a long build is reported in `failures` and left out; it never aborts the
        run. `num_workers` DataLoader processes decode images in parallel with the model.
        """
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}")
        files = [Path(path) for path in paths]
        quiet_skip = BadImageLog("skip", announce=False)  # the caller reports `failures` its own way
        dataset = ImageDataset(files, np.arange(len(files)), self.transform, quiet_skip)
        # One batch: worker processes would only add their start-up time.
        loader = ImageLoader(dataset, batch_size=batch_size, num_workers=num_workers if len(files) > batch_size else 0)
        embeddings = embed_loader(self.model, loader, self.device, self.precision, progress)
        failed = {bad.position: bad.reason for bad in loader.skipped}
        positions = np.asarray([i for i in range(len(files)) if i not in failed], dtype=np.int64)
        failures = [(str(files[i]), failed[i]) for i in sorted(failed)]
        return EmbeddedFiles(embeddings[positions], positions, failures)


def checkpoint_encoder_for_index(
    model_info: ModelInfo | Mapping[str, Any], checkpoint: str | Path | None = None, device: str = "auto"
) -> ImageEncoder:
    """The encoder an index was built with: its recorded checkpoint, or `checkpoint` if it is the same file.

    `model_info` is the index manifest's `model` section (`ImageEncoder.info()` when it was built). An
    index of a backbone without training (`--backbone`) records no checkpoint: its encoder is
    rebuilt from the recorded config, and its weights must have the recorded checksum.

    Raises:
        UserError: the checkpoint is missing, or its sha256 is not the one the index recorded
            (embeddings of another model are not comparable with the index's).
    """
    info = ModelInfo.read(model_info)
    if info.backbone_config is not None:
        return _backbone_encoder(info, checkpoint, device)
    recorded = info.checkpoint_sha256
    if not recorded:
        raise UserError(
            "the index records no checkpoint (built from embeddings that do not name one); rebuild it with "
            "`index build --embeddings ... --checkpoint CKPT` naming the checkpoint that made them"
        )
    if checkpoint is None and not info.checkpoint:
        raise UserError(
            "the index records its checkpoint's sha256 but not its path (built from embedding files); "
            "pass the checkpoint that made the embeddings with --checkpoint CKPT"
        )
    path = Path(checkpoint) if checkpoint is not None else Path(str(info.checkpoint))
    if not path.is_file():
        how = "pass it" if checkpoint is not None else "pass the checkpoint the index was built with"
        raise UserError(f"checkpoint not found: {path}; {how} with --checkpoint CKPT")
    actual = file_sha256(path)
    if actual != recorded:
        raise UserError(
            f"checkpoint {path} is not the one this index was built with (sha256 {actual[:12]}... != "
            f"{recorded[:12]}...); pass the original with --checkpoint or rebuild the index"
        )
    return ImageEncoder.from_checkpoint(path, device=device, sha256=actual)


def _backbone_encoder(info: ModelInfo, checkpoint: str | Path | None, device: str) -> ImageEncoder:
    """The encoder of an index built with `--backbone`, rebuilt from its recorded config and checked against it."""
    config = config_from_dict(dict(info.backbone_config or {}))
    name = config.model.backbone
    if checkpoint is not None:
        raise UserError(f"this index was built from the timm backbone {name} without training; leave out --checkpoint")
    encoder = ImageEncoder.from_backbone(config, device=device)
    if encoder.checkpoint_sha256 != info.checkpoint_sha256:
        source = config.model.weights or ("timm's pretrained weights" if config.model.pretrained else "a seeded init")
        raise UserError(
            f"the weights of backbone {name} ({source}) are not the ones this index was built with; "
            "restore that weights file or rebuild the index"
        )
    return encoder
