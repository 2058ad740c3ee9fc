"""Checkpoints: written atomically with a manifest, loaded as data (`weights_only=True`) and checked."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from retrieval import __version__
from retrieval.errors import UserError
from retrieval.models import Embedder

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "EVALUATION_KEYS",
    "evaluation_payload",
    "is_resumable",
    "load_checkpoint",
    "restore_embedder",
    "save_checkpoint",
    "state_checksum",
]

CHECKPOINT_FORMAT = "retrieval-checkpoint"
CHECKPOINT_VERSION = 2  # 2: best_score/best_epoch of the selection split


# What `best.pt` keeps of a training checkpoint: what evaluation, embedding and indexing read (plus the
# manifest). The optimizer state (twice the weights with AdamW) and the proxies stay in `last.pt`.
# best.pt: the weights, and the loss state (proxies: the classifier of `evaluate --classification/--calibrate`).
EVALUATION_KEYS = ("model", "loss", "config", "num_classes", "epoch", "best_score", "best_epoch")


def evaluation_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The keys of a training `payload` that `best.pt` holds (`EVALUATION_KEYS`), without the optimizer state."""
    return {key: payload[key] for key in EVALUATION_KEYS if key in payload}


def is_resumable(checkpoint: dict[str, Any]) -> bool:
    """Whether a loaded checkpoint holds what `--resume` needs (a `last.pt`, not a `best.pt`)."""
    return all(key in checkpoint for key in ("optimizer", "loss", "best_epoch"))


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over the names and bytes of a state dict's tensors, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_checkpoint(path: Path, payload: dict[str, Any], model_config: dict[str, Any]) -> None:
    """Write `payload` (must hold `model`, a state dict) plus a manifest to `path`, atomically.

    The file is written next to its destination and renamed over it, so a crash never leaves a
    half-written checkpoint behind.
    """
    manifest = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "toolkit_version": __version__,
        "embedding_dim": int(model_config["embedding_dim"]),
        "model_config": model_config,
        "checksum": state_checksum(payload["model"]),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with _replaced_atomically(path) as temporary:
        torch.save({**payload, "manifest": manifest}, temporary)


@contextmanager
def _replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`, else remove it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint on the CPU and check its format, version and model checksum."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}; pass a run's checkpoints/best.pt or last.pt")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        reason = exc.__class__.__name__
        raise UserError(f"cannot read checkpoint {path} ({reason}); is it a retrieval checkpoint?") from exc
    manifest = checkpoint.get("manifest") if isinstance(checkpoint, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not a retrieval checkpoint (no manifest); train one with `retrieval train`")
    if manifest["version"] > CHECKPOINT_VERSION:
        raise UserError(
            f"{path} has checkpoint version {manifest['version']}, newer than this toolkit reads "
            f"({CHECKPOINT_VERSION}); upgrade retrieval (written by {manifest['toolkit_version']})"
        )
    if state_checksum(checkpoint["model"]) != manifest["checksum"]:
        raise UserError(f"{path} is corrupt: model weights do not match the manifest checksum")
    return checkpoint


def restore_embedder(checkpoint: dict[str, Any]) -> Embedder:
    """The checkpoint's `Embedder` with its trained weights; nothing is downloaded or read from model.weights."""
    model = Embedder(**{**checkpoint["manifest"]["model_config"], "pretrained": False, "weights": None})
    model.load_state_dict(checkpoint["model"])
    return model
