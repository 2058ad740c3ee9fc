"""What every epoch loop shares (training, pretraining, the re-ranker's pair model): the epoch's seeding, the
progress bar or heartbeat, the loss read back every `CHECK_EVERY` steps and the stop at its first non-finite value.

Each loop keeps only what differs, its step: `for index, batch in epoch_batches(...)` hands it the batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from torch.utils.data import DataLoader

from retrieval.errors import UserError
from retrieval.runtime.environment import seed_everything
from retrieval.runtime.heartbeat import Progress
from retrieval.train.sampling import epoch_samplers
from retrieval.train.step import LossTracker

__all__ = ["CHECK_EVERY", "epoch_batches", "epoch_seed", "load_resume_part", "seed_epoch"]

# Steps between two read-backs of the loss (the non-finite check and the progress bar): each one
# waits for the GPU, so they are rare; an epoch's end always checks.
CHECK_EVERY = 50


class _Stateful(Protocol):
    def load_state_dict(self, state_dict: Any, /) -> Any: ...


def load_resume_part(name: str, part: _Stateful, state: Any) -> None:
    """Load one part of a `last.pt` into the run's own, or say in one line why it does not fit.

    A resume whose config differs from the run's (backbone, embedding size, loss, optimizer
    groups), or a file whose optimizer was laid out otherwise, fails inside torch with a
    multi-line error; the user's fix is to resume with the run's own config.
    """
    try:
        part.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UserError(
            f"cannot resume: the checkpoint's {name} state does not fit this run's {name} ({reason}); resume with "
            "the config the run was trained with (no --config or --set that changes the model, loss or optimizer)"
        ) from exc


def epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    """Every epoch's randomness depends only on (seed, epoch, rank), so a resumed run continues exactly.

    Ranks draw different augmentations; rank 0 (a single process) keeps the seeds of earlier versions.
    """
    return seed * 1_000_003 + epoch + rank * 104_729


def seed_epoch(loader: DataLoader[Any], seed: int, epoch: int, rank: int = 0) -> None:
    """Seed the global generators, the loader's shuffle and its samplers for 0-based `epoch` (an exact resume)."""
    seed_everything(epoch_seed(seed, epoch, rank))
    if loader.generator is not None:
        loader.generator.manual_seed(epoch_seed(seed, epoch))
    for sampler in epoch_samplers(loader):
        sampler.set_epoch(epoch)


def epoch_batches(
    loader: DataLoader[Any], tracker: LossTracker, epoch: int, epochs: int, advice: str, shown: bool = True
) -> Iterator[tuple[int, Any]]:
    """The loader's `(index, batch)`s in 0-based `epoch` of `epochs`; the caller adds each step's loss to `tracker`.

    A bar on a terminal shows the running loss (a log gets a `Heartbeat` line instead; `shown=False`:
    neither, a torchrun rank other than the first). Every `CHECK_EVERY` steps and after the last, the
    tracker is read back once and the first non-finite loss stops the loop.

    Raises:
        UserError: "the loss became nan at epoch 2, step 7; " + `advice`.
    """
    batches = len(loader)
    progress = Progress(loader, f"epoch {epoch + 1}/{epochs}", shown, loss=tracker.mean)
    for index, batch in enumerate(progress):
        yield index, batch
        if (index + 1) % CHECK_EVERY == 0 or index + 1 == batches:
            bad = tracker.first_non_finite()
            if bad is not None:
                step, value = bad
                raise UserError(f"the loss became {value} at epoch {epoch + 1}, step {step + 1}; {advice}")
            progress.show_loss(tracker.mean())
