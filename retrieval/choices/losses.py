"""The loss registry `LOSSES` (`loss.name` -> loss class), torch-free: names are known before PyTorch loads.

The built-in losses are `module:Class` strings under `retrieval/losses/`, imported on first use, so
`retrieval.config` refuses a name no loss has before PyTorch loads. A new loss is one module: its class
decorated with `@LOSSES.register("name")` (a process that imports the module), or declared in the
`retrieval.losses` entry-point group of its package (`docs/extending.md`).
"""

from __future__ import annotations

from retrieval.errors import UserError
from retrieval.registry import Registry

__all__ = ["LOSSES", "PML_PREFIX", "check_loss_name", "is_pml_name", "unknown_loss_name"]

PML_PREFIX = "pml."  # `pml.<ClassName>`: any pytorch-metric-learning loss (retrieval.losses.pml_adapter)


def _unknown(name: str, names: list[str]) -> str:
    return (
        f"unknown loss.name {name!r}; valid names: {', '.join(sorted(names))}, or any pytorch-metric-learning "
        "loss as pml.<ClassName> (e.g. pml.MultiSimilarityLoss)"
    )


# loss.name -> the loss class (a `retrieval.losses.MetricLoss`); built-ins under retrieval/losses/.
LOSSES: Registry[type] = Registry(
    "loss.name",
    "retrieval.losses",
    {
        name: f"retrieval.losses.{home}"
        for name, home in {
            "proxy_nca": "proxy_nca:ProxyNCALoss",
            "anchor": "anchor:AnchorLoss",
            "arcface": "arcface:ArcFaceLoss",
            "cosface": "cosface:CosFaceLoss",
            "focal_proxy": "focal_proxy:FocalProxyLoss",
            "asymmetric_proxy": "asymmetric_proxy:AsymmetricProxyLoss",
            "proxy_anchor": "proxy_anchor:ProxyAnchorLoss",
            "circle": "circle:CircleLoss",
            "triplet": "triplet:TripletLoss",
            "multi_similarity": "multi_similarity:MultiSimilarityLoss",
            "supcon": "supcon:SupConLoss",
            "contrastive": "contrastive:ContrastiveLoss",
            "soft_triple": "soft_triple:SoftTripleLoss",
        }.items()
    },
    accepts=lambda obj: isinstance(obj, type),
    expected="a loss class (a retrieval.losses.MetricLoss)",
    unknown=_unknown,
)


def check_loss_name(name: str) -> None:
    """Refuse a `loss.name` that no loss can have: not registered, not `pml.<ClassName>`, not a class name.

    A name that starts with a capital may be a pytorch-metric-learning class given bare (`SupConLoss`);
    that and `pml.<ClassName>` are checked against PML when the loss section is built, with torch.

    Raises:
        UserError: the name cannot be a loss; the message lists the registered names.
    """
    if not is_pml_name(name) and not name[:1].isupper() and name not in LOSSES:
        raise unknown_loss_name(name)


def is_pml_name(name: str) -> bool:
    """`name` asks for a pytorch-metric-learning class (`pml.<ClassName>`)."""
    return name.startswith(PML_PREFIX)


def unknown_loss_name(name: str) -> UserError:
    """The error for a `loss.name` that is neither registered nor pytorch-metric-learning's."""
    return LOSSES.unknown(name)
