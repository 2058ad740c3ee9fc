"""The names `loss.name` can take and the class each one builds, as a plain table without torch.

`retrieval.losses.registry.LOSSES` is made from this table (it imports each class), so the names live
in one place, and `retrieval.config` refuses a name no loss has before PyTorch loads. A new loss is
its module under `retrieval/losses/` and one entry here.
"""

from __future__ import annotations

from retrieval.errors import UserError

__all__ = ["LOSS_CLASSES", "PML_PREFIX", "check_loss_name", "is_pml_name", "unknown_loss_name"]

# loss.name -> "module:Class" of the loss under retrieval/losses/.
LOSS_CLASSES: dict[str, str] = {
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
}

PML_PREFIX = "pml."  # `pml.<ClassName>`: any pytorch-metric-learning loss (retrieval.losses.pml_adapter)


def check_loss_name(name: str) -> None:
    """Refuse a `loss.name` that no loss can have: not registered, not `pml.<ClassName>`, not a class name.

    A name that starts with a capital may be a pytorch-metric-learning class given bare (`SupConLoss`);
    that and `pml.<ClassName>` are checked against PML when the loss section is built, with torch.

    Raises:
        UserError: the name cannot be a loss; the message lists the registered names.
    """
    if name not in LOSS_CLASSES and not is_pml_name(name) and not name[:1].isupper():
        raise unknown_loss_name(name)


def is_pml_name(name: str) -> bool:
    """`name` asks for a pytorch-metric-learning class (`pml.<ClassName>`)."""
    return name.startswith(PML_PREFIX)


def unknown_loss_name(name: str) -> UserError:
    """The error for a `loss.name` that is neither registered nor pytorch-metric-learning's."""
    return UserError(
        f"unknown loss.name {name!r}; valid names: {', '.join(sorted(LOSS_CLASSES))}, or any pytorch-metric-learning "
        "loss as pml.<ClassName> (e.g. pml.MultiSimilarityLoss)"
    )
