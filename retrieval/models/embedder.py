"""The image embedder: a timm or registered backbone -> global pooling -> Linear (or none) -> L2 normalization."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import timm
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from retrieval.errors import UserError
from retrieval.models.backbone_weights import load_backbone_weights
from retrieval.models.backbones import BackboneBuilder, backbone_builder, registered_backbones
from retrieval.models.pooling import FEATURE_MAP_POOLINGS, POOLINGS, TIMM_POOLINGS, GlobalPool

if TYPE_CHECKING:
    from retrieval.data.transforms import ModelDataConfig

__all__ = ["Embedder", "create_backbone"]


class _TimmModel(Protocol):
    """The contract every timm model honours beyond `nn.Module`, which `timm.create_model` is annotated to return."""

    def forward_features(self, x: Tensor) -> Tensor: ...

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor: ...


def _timm(backbone: nn.Module) -> _TimmModel:
    """`backbone` seen through timm's model contract (every model `create_backbone` builds honours it)."""
    return cast(_TimmModel, backbone)


class Embedder(nn.Module):
    """Maps images `(B, C, H, W)` to L2-normalized embeddings `(B, embedding_dim)`.

    Any timm model works as backbone, built without classifier (`num_classes=0`). With timm's
    poolings (`avg`, `max`, `token`) the backbone pools itself: `forward_head(pre_logits=True)`, so a
    ViT's `avg` leaves out its class token and `token` is the class token. Our poolings (`avgmax`,
    `gem`) need feature maps: the backbone is built without pooling and its `forward_features`
    `(B, C, H, W)` (or NHWC) output is pooled here. Token backbones (ViTs: `(B, N, C)`) take timm's
    poolings only: the model's own pooling knows its prefix tokens and head norm, which a generic
    pooling of the token sequence would get wrong; a feature-map pooling is refused when the
    model is built. The Linear head's input width is measured, not read from `num_features`
    (`_pooled_width`). A registered backbone (`retrieval.models.backbones`) is called as it is:
    its feature maps are pooled here (`avg`, `max`, `avgmax`, `gem`), features it pooled itself
    `(B, F)` pass through `avg` or `max` unchanged.

    Args:
        backbone: a timm model name, e.g. `resnet50`, `resnet18`, `vit_small_patch16_224`, or the
            name of a registered backbone (`retrieval.models.backbones.register_backbone`).
        embedding_dim: size of the output embedding; None: no Linear head, the backbone's pooled
            features are the embedding, the baseline without training.
        pooling: timm's `avg`, `max` or `token` (class token), or ours for feature maps: `avgmax`
            (the *sum* of average and max pooling; timm's `avgmax` is their mean) or `gem` (GeM, p = 3).
        pretrained: load timm's pretrained weights (downloads, or uses timm's cache).
        weights: path to a local `.safetensors` / `.pth` state dict of the backbone (offline use);
            a classifier head in it is dropped. Implies pretrained weights. Every tensor must fit.
        weights_partial: load the tensors of `weights` that fit and leave the rest initialized
            (one logged line says how many matched), instead of refusing the file.
        in_chans: number of input channels.
        output_stride: timm's `output_stride` for CNNs that support it (8 or 16 dilate the last
            stages instead of striding, so a 32 px image keeps a 2x2 or 4x4 map, not 1x1); None
            builds the model as timm defines it.
        flip_average: in eval mode, embed each image and its mirror image and return the unit
            mean of the two (test-time augmentation, 2x the inference cost). Only for images whose
            mirror is the same object (garments, products; not characters). Training is unchanged.
    """

    def __init__(
        self,
        backbone: str = "resnet50",
        embedding_dim: int | None = 128,
        pooling: str = "avgmax",
        pretrained: bool = False,
        weights: str | Path | None = None,
        weights_partial: bool = False,
        in_chans: int = 3,
        output_stride: int | None = None,
        flip_average: bool = False,
    ) -> None:
        super().__init__()
        if embedding_dim is not None and embedding_dim < 1:
            raise UserError(f"model.embedding_dim must be >= 1, got {embedding_dim}")
        if pooling not in POOLINGS:
            raise UserError(f"unknown model.pooling {pooling!r}; valid: {', '.join(POOLINGS)}")
        self.backbone_name = backbone
        self.pooling = pooling
        self.timm_backbone = timm.is_model(backbone)  # else registered: a plain module, called as it is
        global_pool = pooling if pooling in TIMM_POOLINGS else ""
        self.backbone = create_backbone(
            backbone,
            pretrained=pretrained,
            weights=weights,
            weights_partial=weights_partial,
            in_chans=in_chans,
            global_pool=global_pool,
            output_stride=output_stride,
        )
        if not self.timm_backbone and pooling == "token":
            raise UserError(
                f"model.pooling=token takes a timm ViT's class token; {backbone} is a registered backbone: "
                "use model.pooling=avg, max, avgmax or gem"
            )
        self.channels_last_features = getattr(self.backbone, "output_fmt", "NCHW") == "NHWC"
        self.pool = GlobalPool(pooling) if pooling in FEATURE_MAP_POOLINGS else None
        self.flip_average = flip_average
        self.head: nn.Module = nn.Identity()
        width = self._pooled_width(in_chans)
        if embedding_dim is not None:
            self.head = nn.Linear(width, embedding_dim)
        self.embedding_dim = width if embedding_dim is None else embedding_dim

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` images -> `(B, embedding_dim)` unit vectors (float32 even under autocast)."""
        embeddings = self.embed(images)
        if self.flip_average and not self.training:
            return F.normalize(embeddings + self.embed(images.flip(-1)), dim=1)
        return embeddings

    def embed(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` images -> `(B, embedding_dim)` float32 unit vectors of the images as they are."""
        embeddings = self.head(self.features(images))
        return F.normalize(embeddings.float(), dim=1)

    def features(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` images -> `(B, F)` pooled backbone features, before the head (what pretraining reads)."""
        features = _timm(self.backbone).forward_features(images) if self.timm_backbone else self.backbone(images)
        return self.pool_features(features)

    def _pooled_width(self, in_chans: int) -> int:
        """Width of `pool_features(forward_features(images))`: what the Linear head receives.

        Measured by a forward on shape-only (meta) tensors, which costs no arithmetic and no memory:
        timm's `num_features` is the width of `forward_features`, but with timm's pooling a model's
        own head may change it after pooling (MobileNetV3's `conv_head`: `head_hidden_size`), and
        only a forward shows a token backbone given one of our feature-map poolings (refused here,
        at build time, not at the first step).
        """
        _, height, width = timm.data.resolve_model_data_config(self.backbone)["input_size"]
        tensors = [*self.named_parameters(), *self.named_buffers()]
        shapes = {name: torch.empty_like(tensor, device="meta") for name, tensor in tensors}
        images = torch.empty(2, in_chans, height, width, device="meta")  # 2: BatchNorm in training mode needs > 1
        pooled = torch.func.functional_call(self, shapes, (images,), strict=False)
        return int(pooled.shape[1])

    def pool_features(self, features: Tensor) -> Tensor:
        """The backbone's `forward_features` output -> `(B, F)` pooled features (`_pooled_width`), before the head."""
        if self.pool is None and self.timm_backbone:
            return _timm(self.backbone).forward_head(features, pre_logits=True)
        if self.pool is None:  # a registered backbone's maps, pooled as timm's avg or max would; (B, F) as is
            if features.ndim == 2:
                return features
            return features.mean(dim=(2, 3)) if self.pooling == "avg" else features.amax(dim=(2, 3))
        if features.ndim != 4:
            raise UserError(
                f"model.pooling={self.pool.kind} pools CNN feature maps, but {self.backbone_name} gives "
                f"{features.ndim}-d token features; use model.pooling={' or '.join(TIMM_POOLINGS)}"
            )
        if self.channels_last_features:
            features = features.permute(0, 3, 1, 2)
        return self.pool(features)

    def data_config(self) -> ModelDataConfig:
        """timm's preprocessing for this backbone (mean, std, interpolation, crop_pct)."""
        return cast("ModelDataConfig", timm.data.resolve_model_data_config(self.backbone))


def create_backbone(
    name: str,
    pretrained: bool = False,
    weights: str | Path | None = None,
    weights_partial: bool = False,
    in_chans: int = 3,
    global_pool: str = "",
    output_stride: int | None = None,
) -> nn.Module:
    """A timm model without classifier, pooling with `global_pool` ("" for none), or a registered backbone.

    Models with absolute position embeddings (ViT, DeiT, EVA, ...) are built with timm's
    `dynamic_img_size`: they keep their native position grid (so pretrained weights and checkpoints
    fit whatever `data.image_size` is) and resample it to each input's grid, 2x2 patches at 32 px
    included. `weights` are loaded strictly unless `weights_partial` (`load_backbone_weights`).

    A registered backbone (`retrieval.models.backbones`) is its builder's module, built with
    `pretrained` and `in_chans`; it takes no `weights` file and no `output_stride` (its builder
    decides both).

    Raises:
        UserError: for unknown names, missing weights or weights that do not fit, or a pooling or
            output stride the model does not offer.
    """
    if not timm.is_model(name):
        builder = backbone_builder(name)
        if builder is not None:
            return _registered(name, builder, pretrained, in_chans, weights, output_stride)
        close = difflib.get_close_matches(name, [*registered_backbones(), *timm.list_models()], n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see timm.list_models()"
        raise UserError(
            f"unknown backbone {name!r} (model.backbone): neither a timm model nor a registered one "
            f"(retrieval.models.backbones); {hint}"
        )
    path = None if weights is None else Path(weights)
    if path is not None and not path.is_file():
        raise UserError(f"model.weights file not found: {path}; give the path to a .safetensors or .pth state dict")
    # The model's own constructor arguments, which timm passes on untyped (`**kwargs: Any`).
    extra: dict[str, Any] = {} if output_stride is None else {"output_stride": output_stride}
    from_hub = pretrained and path is None
    try:
        model = _create(name, from_hub, in_chans, global_pool, extra)
    except TypeError as exc:  # a model whose constructor has no output_stride; other TypeErrors are bugs
        if "output_stride" not in str(exc):
            raise
        raise UserError(
            f"timm's {name} has no output_stride ({exc}); leave model.output_stride unset for this backbone"
        ) from exc
    except AssertionError as exc:  # timm checks its arguments with asserts
        raise UserError(
            f"timm cannot build {name} with pooling {global_pool!r} ({exc}); choose another model.pooling"
        ) from exc
    except (OSError, RuntimeError) as exc:
        if not from_hub:
            raise
        raise UserError(
            f"could not load pretrained weights for {name} (download failed; offline?): "
            f"{str(exc).splitlines()[0][:200]}; "
            "set model.weights=PATH to a local .safetensors/.pth state dict, or model.pretrained=false"
        ) from exc
    if path is not None:
        load_backbone_weights(model, name, path, in_chans, weights_partial)
    return model


def _registered(
    name: str,
    builder: BackboneBuilder,
    pretrained: bool,
    in_chans: int,
    weights: str | Path | None,
    output_stride: int | None,
) -> nn.Module:
    """A registered builder's module, refusing first the timm-only options its builder does not take."""
    if weights is not None or output_stride is not None:
        option = "model.weights" if weights is not None else "model.output_stride"
        raise UserError(
            f"{option} applies to timm backbones; {name} is a registered backbone, whose builder loads its own "
            f"weights (model.pretrained) and sets its own strides: leave {option} unset"
        )
    model = builder(pretrained=pretrained, in_chans=in_chans)
    if not isinstance(model, nn.Module):
        raise UserError(f"the builder of backbone {name!r} returned {type(model).__name__}, not a torch nn.Module")
    return model


def _create(name: str, pretrained: bool, in_chans: int, global_pool: str, extra: dict[str, Any]) -> nn.Module:
    """`timm.create_model` without classifier, with `dynamic_img_size` where the model's constructor takes it."""
    arguments: dict[str, Any] = {
        "pretrained": pretrained,
        "num_classes": 0,
        "global_pool": global_pool,
        "in_chans": in_chans,
        **extra,
    }
    try:
        return timm.create_model(name, dynamic_img_size=True, **arguments)
    except TypeError as exc:  # the constructor refuses an argument before building anything
        if "dynamic_img_size" not in str(exc):
            raise
    return timm.create_model(name, **arguments)
