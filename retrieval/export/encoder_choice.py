"""Which model embeds the images (`--checkpoint | --model | --backbone`): the choice, its checks, and opening it.

`index build`, `audit` and `embed` take their model from the same flags: a run's checkpoint (torch), a
`retrieval export` directory (onnxruntime, no torch), or a timm backbone without training (torch; its
image size and transform from a config). `EncoderChoice` is that choice as one record; its `check`
refuses what the flags and the files show before any model library loads, and `open_encoder` opens it
as an `Encoder`, importing torch only for a checkpoint or a backbone. (The model an index records is
opened by `retrieval.export.index_encoder.encoder_for_index`.) Both live in `export/`, the layer that
may import either encoder; this module imports neither until it opens one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.errors import UserError
from retrieval.runtime.checkpoint_files import existing_checkpoint

if TYPE_CHECKING:
    from retrieval.checkpoint import Checkpoint
    from retrieval.inference.interface import Encoder

__all__ = ["EncoderChoice", "open_encoder"]


@dataclass(frozen=True)
class EncoderChoice:
    """The model of `--checkpoint`, `--model` or `--backbone` (at most one; none when a command needs no model).

    Attributes:
        checkpoint: a run's checkpoint (`checkpoints/best.pt`).
        model: a `retrieval export` directory, run by onnxruntime.
        backbone: a timm model without training (`retrieval.inference.backbone`): its pooled features;
            `weights` is its state dict file, `config` and `overrides` (`section.key=value`) give its image
            size and transform (the digits demo's without a file).
        device: where the model runs: `auto`, `cpu`, `cuda` or `cuda:N`.

    Raises:
        ValueError: more than one of checkpoint, model and backbone (the parsers make them exclusive).
    """

    checkpoint: Path | None = None
    model: Path | None = None
    backbone: str | None = None
    weights: Path | None = None
    config: Path | None = None
    overrides: tuple[str, ...] = ()
    device: str = "auto"

    def __post_init__(self) -> None:
        if sum(value is not None for value in (self.checkpoint, self.model, self.backbone)) > 1:
            raise ValueError("an EncoderChoice takes at most one of checkpoint, model and backbone")

    @property
    def chosen(self) -> bool:
        """Whether a model is named at all."""
        return self.checkpoint is not None or self.model is not None or self.backbone is not None

    def check(self) -> None:
        """Refuse, before PyTorch loads, what the flags and the files show: a backbone's options given for another
        model, a checkpoint that is not there, a mistake in a backbone's config or `--set`.

        Raises:
            UserError: one of those, in one line.
        """
        if self.backbone is None and (self.weights is not None or self.config is not None or self.overrides):
            raise UserError("--weights, --config and --set describe a --backbone; a checkpoint holds its own")
        if self.checkpoint is not None:
            existing_checkpoint(self.checkpoint)
        if self.backbone is not None:
            from retrieval.config import check_config  # pydantic: only a backbone's config needs it

            check_config(self.config, self.overrides)


def open_encoder(choice: EncoderChoice, loaded: Checkpoint | None = None) -> Encoder:
    """The encoder of `choice`: an export's `OnnxEncoder`, or the `ImageEncoder` of a checkpoint or a backbone.

    Args:
        choice: the model, named.
        loaded: the file of `choice.checkpoint`, already read by a caller that needs it too (its data
            section, its model-selection record), so that it is read once.

    Raises:
        ValueError: no model chosen.
        UserError: the model cannot be opened (a damaged checkpoint or export, an unknown backbone).
    """
    if choice.model is not None:
        from retrieval.export.onnx_encoder import OnnxEncoder

        return OnnxEncoder.from_export(choice.model, device=choice.device)
    from retrieval.inference.image_encoder import ImageEncoder  # torch: only a checkpoint or a backbone needs it

    if choice.checkpoint is not None:
        from retrieval.checkpoint import Checkpoint

        checkpoint = loaded if loaded is not None else Checkpoint.read(choice.checkpoint)
        return ImageEncoder.from_loaded(checkpoint, choice.checkpoint, device=choice.device)
    if choice.backbone is None:
        raise ValueError("open_encoder needs a chosen model: a checkpoint, an export directory or a backbone")
    from retrieval.config import load_config
    from retrieval.inference.backbone import backbone_config

    config = backbone_config(load_config(choice.config, choice.overrides), choice.backbone, choice.weights)
    return ImageEncoder.from_backbone(config, device=choice.device)
