"""The encoder that embeds images for an index: its ONNX export without torch, or its checkpoint with torch.

An index manifest's `model` section is the `info()` of the encoder that built it. An export's
(`onnx_sha256`) loads `retrieval.export.onnx_encoder.OnnxEncoder` (onnxruntime, numpy, Pillow);
only a checkpoint's or a timm backbone's imports `retrieval.inference.image_encoder`, and with it torch.
So `serve --model DIR` and `index query` of an export run with the `serve` extra alone. It lives in
`export/`, the layer above `inference/` (which never imports `export/`), and imports the checkpoint's
encoder only inside the function that needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrieval.errors import UserError
from retrieval.export.onnx_encoder import onnx_encoder_for_index
from retrieval.inference.interface import Encoder, ModelInfo

__all__ = ["encoder_for_index"]


def encoder_for_index(
    model_info: ModelInfo | Mapping[str, Any],
    checkpoint: str | Path | None = None,
    device: str = "auto",
    model_dir: str | Path | None = None,
) -> Encoder:
    """The encoder an index was built with: the recorded model, or `checkpoint` / `model_dir` if it is the same file.

    Args:
        model_info: the index manifest's `model` section (read and checked if a plain mapping).
        checkpoint: the index's checkpoint if it moved (must have the recorded sha256).
        device: where the model runs (`auto`, `cpu`, `cuda`, `cuda:N`).
        model_dir: the index's export directory if it moved (must hold the recorded model.onnx).

    Raises:
        UserError: a checkpoint for an index built with an export or the reverse, or a model that is
            missing or not the one the index recorded.
    """
    model_info = ModelInfo.read(model_info)
    built_with_export = bool(model_info.onnx_sha256)
    if built_with_export and checkpoint is not None:
        raise UserError("this index was built with an ONNX export, not a checkpoint; pass --model DIR, or neither")
    if built_with_export or model_dir is not None:
        return onnx_encoder_for_index(model_info, model_dir, device)
    from retrieval.inference.image_encoder import checkpoint_encoder_for_index  # torch, only for a checkpoint's index

    return checkpoint_encoder_for_index(model_info, checkpoint, device)
