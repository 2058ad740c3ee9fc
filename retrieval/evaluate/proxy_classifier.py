"""The classifier a proxy loss trains: `softmax(s * cos(f, P))` over the training classes, and its calibration.

Used by `retrieval evaluate --classification` and `--calibrate` on closed-set data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config
from retrieval.data import EvalSplit
from retrieval.errors import UserError
from retrieval.losses import build_loss
from retrieval.metrics.calibration import fit_temperature, temperature_softmax
from retrieval.metrics.classification import CalibrationSummary, calibration_summary
from retrieval.metrics.groups import proxy_predictions
from retrieval.validation import Record

__all__ = ["Calibration", "ProxyClassifier", "calibrate", "closed_set_rows", "load_proxy_classifier"]


@dataclass(frozen=True)
class ProxyClassifier:
    """Class proxies and the logit scale the loss trained them with."""

    proxies: np.ndarray  # (K, D) float32
    scale: float  # s of the logits s * cos; the base scale (Anchor: gamma, as c_i needs the label)

    def logits(self, embeddings: np.ndarray) -> np.ndarray:
        """`(N, K)` logits `s * cos(f_i, P_j)` of `(N, D)` embeddings."""
        return self.scale * proxy_predictions(embeddings, self.proxies).astype(np.float64)


def load_proxy_classifier(checkpoint: Checkpoint, config: Config) -> ProxyClassifier | None:
    """The checkpoint's proxy classifier, or None when its loss has no proxies (pair losses).

    The scale is the configured loss's `MetricLoss.logit_scale`: `scale` of a fixed-scale loss,
    `gamma` of the Anchor Loss (its per-sample c_i needs the true class, unknown at test time), 1.0
    otherwise. The loss is built from the config because its hyperparameters are what set the scale.
    """
    proxies = checkpoint.proxies
    if proxies is None:
        return None
    loss = build_loss(config.loss.name, config.loss.params, proxies.shape[0], proxies.shape[1])
    return ProxyClassifier(proxies.float().numpy(), loss.logit_scale)


def closed_set_rows(split: EvalSplit, what: str) -> np.ndarray:
    """Indices of the split's images whose class trained (the classifier can name them).

    Raises:
        UserError: when none did (zero-shot data has no classifier to score).
    """
    if split.train_class is None or not (split.train_class >= 0).any():
        raise UserError(
            f"{what} needs closed-set data (test classes seen in training), but no image of this split belongs to a "
            "training class; it applies to data such as the digits demo or a CSV whose test labels also train"
        )
    return np.flatnonzero(split.train_class >= 0)


class Calibration(Record):
    """A temperature fitted on held-out images, and the test images' calibration before and after it.

    `evaluate --json` writes it as its `calibration` entry, with the share of the validation split
    it was fitted on (`calibration_share`, set by the caller; unset, it is absent).
    """

    temperature: float
    num_calibration_images: int
    logit_scale: float  # the loss's scale s of softmax(s * cos(f, P)), the temperature's unit
    before: CalibrationSummary
    after: CalibrationSummary
    calibration_share: float | None = None


def calibrate(
    classifier: ProxyClassifier,
    calibration: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
) -> Calibration:
    """Fit a temperature on the calibration images; ECE, Brier and accuracy on test before and after.

    Args:
        classifier: the proxy classifier.
        calibration: `(N_cal, D)` embeddings and `(N_cal,)` training classes of held-out images
            (the validation split, never the test set).
        test: the same for the test images.

    Returns:
        The record of `temperature`, `num_calibration_images`, `logit_scale`, and `before` / `after` summaries
        (`calibration_summary`) on the test images.
    """
    temperature = fit_temperature(classifier.logits(calibration[0]), calibration[1])
    test_logits = classifier.logits(test[0])
    return Calibration(
        temperature=temperature,
        num_calibration_images=len(calibration[1]),
        logit_scale=classifier.scale,
        before=calibration_summary(temperature_softmax(test_logits), test[1]),
        after=calibration_summary(temperature_softmax(test_logits, temperature), test[1]),
    )
