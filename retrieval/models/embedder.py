"""The image embedder: timm backbone -> global pooling -> Linear -> L2 normalization."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import timm
import torch.nn.functional as F
from torch import Tensor, nn

from retrieval.errors import UserError
from retrieval.models.pooling import GlobalPool

__all__ = ["Embedder", "create_backbone"]


class Embedder(nn.Module):
    """Maps images `(B, C, H, W)` to L2-normalized embeddings `(B, embedding_dim)`.

    Any timm model works as backbone: it is built without classifier and pooling
    (`num_classes=0, global_pool=""`) and its `forward_features` output is pooled here.

    Args:
        backbone: a timm model name, e.g. `resnet50`, `resnet18`, `vit_small_patch16_224`.
        embedding_dim: size of the output embedding.
        pooling: `avg`, `max`, `avgmax` (sum of both) or `gem`.
        pretrained: load timm's pretrained weights (downloads, or uses timm's cache).
        weights: path to a local `.safetensors` / `.pth` state dict of the backbone (offline use);
            a classifier head in it is dropped. Implies pretrained weights.
        in_chans: number of input channels.
    """

    def __init__(
        self,
        backbone: str = "resnet50",
        embedding_dim: int = 128,
        pooling: str = "avgmax",
        pretrained: bool = False,
        weights: str | Path | None = None,
        in_chans: int = 3,
    ) -> None:
        super().__init__()
        if embedding_dim < 1:
            raise UserError(f"model.embedding_dim must be >= 1, got {embedding_dim}")
        self.backbone = create_backbone(backbone, pretrained=pretrained, weights=weights, in_chans=in_chans)
        self.channels_last_features = getattr(self.backbone, "output_fmt", "NCHW") == "NHWC"
        self.pool = GlobalPool(pooling)
        self.head = nn.Linear(self.backbone.num_features, embedding_dim)
        self.embedding_dim = embedding_dim

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` images -> `(B, embedding_dim)` unit vectors (float32 even under autocast)."""
        features = self.backbone.forward_features(images)
        if self.channels_last_features and features.ndim == 4:
            features = features.permute(0, 3, 1, 2)
        embeddings = self.head(self.pool(features))
        return F.normalize(embeddings.float(), dim=1)

    def data_config(self) -> dict[str, Any]:
        """timm's preprocessing for this backbone (mean, std, interpolation, crop_pct)."""
        return timm.data.resolve_model_data_config(self.backbone)


def create_backbone(
    name: str, pretrained: bool = False, weights: str | Path | None = None, in_chans: int = 3
) -> nn.Module:
    """A timm model without classifier or pooling; raises `UserError` for unknown names or missing weights."""
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see timm.list_models()"
        raise UserError(f"unknown backbone {name!r} (model.backbone): {hint}")
    overlay: dict[str, Any] = {}
    if weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise UserError(f"model.weights file not found: {path}; give the path to a .safetensors or .pth state dict")
        overlay = {"file": str(path)}
        pretrained = True
    try:
        return timm.create_model(
            name,
            pretrained=pretrained,
            pretrained_cfg_overlay=overlay or None,
            num_classes=0,
            global_pool="",
            in_chans=in_chans,
        )
    except (OSError, RuntimeError) as exc:
        if not pretrained:
            raise
        source = f"from {weights}" if weights is not None else "(download failed; offline?)"
        raise UserError(
            f"could not load pretrained weights for {name} {source}: {str(exc).splitlines()[0][:200]}; "
            "set model.weights=PATH to a local .safetensors/.pth state dict, or model.pretrained=false"
        ) from exc
