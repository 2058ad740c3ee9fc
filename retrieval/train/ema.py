"""Weight averaging: an exponential moving average (EMA) of the model and its loss's proxies (`train.ema`)."""

from __future__ import annotations

from timm.utils import ModelEmaV3
from torch import Tensor, nn

from retrieval.checkpoint import StateDict

__all__ = ["WeightAverage"]


class WeightAverage:
    """An EMA of a model and its loss (the proxies), updated after every optimizer step (timm's `ModelEmaV3`).

    The first update copies the weights; each later one sets `average = decay * average + (1 - decay) *
    weights` for every parameter and float buffer (BatchNorm statistics included). It averages over
    roughly the last 1 / (1 - decay) optimizer steps: 0.999 over ~1,000, so a run of a few hundred
    steps wants a smaller decay (0.99). The proxies are averaged with the model, so the averaged
    embeddings are scored against averaged proxies. The averaged copy stays in eval mode.

    Args:
        model: the embedder being trained.
        loss: its loss (holds the proxies of proxy losses).
        decay: the EMA decay, in (0, 1).
    """

    def __init__(self, model: nn.Module, loss: nn.Module, decay: float) -> None:
        self._source = nn.ModuleDict({"model": model, "loss": loss})
        self._ema = ModelEmaV3(self._source, decay=decay)

    @property
    def averaged(self) -> nn.ModuleDict:
        """The averaged copy: `averaged["model"]` and `averaged["loss"]`; its state dict is what `last.pt` keeps."""
        module: nn.ModuleDict = self._ema.module
        return module

    @property
    def model(self) -> nn.Module:
        """The averaged model."""
        return self.averaged["model"]

    @property
    def proxies(self) -> Tensor | None:
        """The averaged loss's proxies `(K, D)`, or None for losses without any."""
        proxies = getattr(self.averaged["loss"], "proxies", None)
        return proxies if isinstance(proxies, Tensor) else None

    def weights(self) -> tuple[StateDict, StateDict]:
        """The averaged (model, loss) state dicts."""
        return self.averaged["model"].state_dict(), self.averaged["loss"].state_dict()

    def update(self, step: int) -> None:
        """Average in the current weights after the run's 1-based optimizer step `step` (step 1 copies them)."""
        self._ema.update(self._source, step=step)

    def reset(self) -> None:
        """Start the average over from the current weights (a resume of a run that trained without EMA)."""
        self._ema.set(self._source)
