"""The training loop: epochs, evaluation, honest model selection, checkpoints and records.

Model selection is honest: the result is the epoch with the best validation metric
(`select_on`), or the last epoch when there is no validation split. The test set is scored
once, at the end, on the selected weights; choosing on it needs `select_on_test`, and then every
test figure is labelled as selected on test.

The `Trainer` only runs the loop: the parts it drives (model, loss, loader, optimizer, schedule,
step, evaluators) come built in `TrainingParts` (`retrieval.train.builders`), its settings in
`TrainSettings`. `Trainer.from_config(config, run_dir)` does both from a `Config`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from tqdm import tqdm

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, config_to_dict
from retrieval.errors import UserError
from retrieval.evaluate.uncertainty import record_uncertainty
from retrieval.report.plots import plot_curves, plot_run
from retrieval.runtime.environment import describe_environment, seed_everything
from retrieval.train.builders import TrainingParts, build_training
from retrieval.train.diagnostics import EpochDiagnostics, describe_stats
from retrieval.train.loaders import epoch_samplers
from retrieval.train.run_files import RunFiles
from retrieval.train.settings import TrainSettings
from retrieval.train.step import LossTracker

__all__ = ["TrainResult", "Trainer"]

# Steps between two read-backs of the loss (the non-finite check and the progress bar): each one
# waits for the GPU, so they are rare; an epoch's end always checks.
CHECK_EVERY = 50

StateDict = dict[str, Any]


def _load_part(name: str, part: nn.Module | torch.optim.Optimizer, state: StateDict) -> None:
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


def _epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    """Every epoch's randomness depends only on (seed, epoch, rank), so a resumed run continues exactly.

    Ranks draw different augmentations; rank 0 (a single process) keeps the seeds of earlier versions.
    """
    return seed * 1_000_003 + epoch + rank * 104_729


@dataclasses.dataclass
class TrainResult:
    """What a finished run reports: the selected checkpoint and its test metrics (scored once)."""

    epoch: int  # the selected epoch (1-based)
    selected_on: str  # "val", "test" (optimistic, opted in) or "last" (no validation split)
    test: dict[str, float]  # Recall@K, MAP@R, R-precision of the selected checkpoint on the test set
    selection_value: float | None = None  # the selection metric's value at that epoch
    uncertainty: dict[str, Any] = dataclasses.field(default_factory=dict)  # test R@1 / MAP@R 95% bootstrap CIs

    @property
    def label(self) -> str:
        """The tag every printed test figure carries when the checkpoint was chosen on the test set."""
        return "selected on test" if self.selected_on == "test" else ""

    def describe(self, metric: str) -> str:
        """One line saying which checkpoint the test figures belong to and why."""
        if self.selected_on == "last":
            return f"result: last epoch ({self.epoch}); no validation split, so nothing was selected"
        where = "validation set" if self.selected_on == "val" else "TEST set (train.select_on_test; optimistic)"
        return f"result: epoch {self.epoch}, best {metric} {self.selection_value:.4f} on the {where}"


class Trainer:
    """Trains `parts.model` with `parts.loss` and writes the run directory `settings.run_dir`.

    The run directory holds `config.yaml` (with a run config), `environment.json` (versions,
    threads, CPU), `metrics.jsonl` (one JSON object per epoch, with the seconds spent training,
    evaluating and writing, and the training images per second), `result.json` (the selected
    epoch's test metrics), `plots/*.png` and, with a model config, `checkpoints/last.pt`
    (everything a resume needs, every epoch) and `best.pt` (the selected weights, no optimizer state).

    The model needs only `forward(images) -> (B, D)`; `settings.freeze_backbone_epochs > 0` also
    needs a `backbone` submodule (the part frozen first). Under torchrun (an initialized process
    group) every process trains its share of each global batch, evaluates its shard of each
    split, and only rank 0 writes files and prints.

    Building a `Trainer` changes no process-wide setting; `fit` reseeds the global generators at
    the start of every epoch from (seed, epoch, rank), the loop's contract for an exact resume.

    Args:
        parts: the built parts (`build_training`, `assemble_training`).
        settings: epochs, evaluation, selection and what to record.

    Raises:
        UserError: `freeze_backbone_epochs > 0` for a model without a `backbone` submodule.
    """

    def __init__(self, parts: TrainingParts, settings: TrainSettings) -> None:
        self.parts = parts
        self.settings = settings
        self.files = RunFiles(settings.run_dir)
        self.backbone = _backbone(parts.model, settings.freeze_backbone_epochs)
        self.base_lrs = [group["lr"] for group in parts.optimizer.param_groups]
        self.selection_split = "test" if settings.select_on_test else ("val" if "val" in parts.evaluators else None)
        self.start_epoch, self.best_score, self.best_epoch = 0, -1.0, 0
        self._best_weights: tuple[StateDict, StateDict] | None = None  # (model, loss) of the selected epoch, CPU

    @classmethod
    def from_config(cls, config: Config, run_dir: Path, resuming: bool = False) -> Trainer:
        """The trainer of the run `config` describes (`build_training`), writing to `run_dir`.

        Args:
            config: the resolved run config.
            run_dir: where the run's files go.
            resuming: the weights will come from a checkpoint (`resume`), so no pretrained weights are loaded.
        """
        settings = TrainSettings.from_config(config.train, run_dir, config.model, config_to_dict(config))
        return cls(build_training(config, resuming), settings)

    def resume(self, checkpoint: Checkpoint, best: Checkpoint | None = None) -> None:
        """Continue from a loaded `last.pt`: weights, proxies, optimizer, epoch and the selection so far.

        Args:
            checkpoint: the run's `last.pt`.
            best: the run's `best.pt`; needed when the selected epoch so far is not `last.pt`'s.

        Raises:
            UserError: the selected weights are in neither checkpoint, or a part of `checkpoint` does not
                fit this run's (another model, loss or optimizer layout).
        """
        parts = self.parts
        _load_part("model", parts.model, checkpoint.model)
        _load_part("loss", parts.loss, checkpoint.loss)
        _load_part("optimizer", parts.optimizer, checkpoint.optimizer or {})
        self.start_epoch = checkpoint.epoch + 1
        self.best_score, self.best_epoch = checkpoint.best_score, checkpoint.best_epoch
        if self.best_epoch:
            selected = checkpoint if self.best_epoch == self.start_epoch else best
            if selected is None:
                raise UserError(
                    f"the run's selected epoch {self.best_epoch} is in checkpoints/best.pt, which is missing; "
                    "resume from a run directory that still holds it"
                )
            self._best_weights = (selected.model, selected.loss)

    def fit(self) -> TrainResult:
        """Train all remaining epochs, then score the selected weights on the test set once."""
        context, epochs = self.parts.context, self.settings.epochs
        records: list[dict[str, Any]] = context.broadcast(
            self.files.read_records(self.start_epoch) if context.is_main else []
        )
        if context.is_main:
            environment = describe_environment(self.parts.device) | {"world_size": context.world_size}
            self.files.start(environment, self.settings.run_config, records)
        for epoch in range(self.start_epoch, epochs):
            started = time.perf_counter()
            record = self._train_epoch(epoch)
            trained = time.perf_counter()
            if (epoch + 1) % self.settings.eval_every == 0 or epoch + 1 == epochs:
                record.update(self._evaluate_epoch())
            evaluated = time.perf_counter()
            self._save(epoch, record)
            if context.is_main:
                plot_curves(records + [record], self.files.plots / "curves.png")  # the diagnostics: at the end
            written = time.perf_counter()
            record["time"] = {
                "train": round(trained - started, 3),
                "eval": round(evaluated - trained, 3),
                "write": round(written - evaluated, 3),
            }
            record["images_per_second"] = round(record.pop("images") / max(trained - started, 1e-9), 1)
            record["seconds"] = round(written - started, 3)
            records.append(record)
            if context.is_main:
                self.files.append_record(record)
                print(self._summary(record), flush=True)  # one line per epoch, also when stdout is a file
        if context.is_main:
            plot_run(self.settings.run_dir)
        result = self._final_result()
        if context.is_main:
            self.files.write_result(dataclasses.asdict(result))
        return result

    def train_step(self, images: Tensor, labels: Tensor, step: int) -> Tensor:
        """One optimizer step of the run's global step `step` on a batch; returns its loss, on the device.

        The lr is set for `step`, the batch moved to the device (NHWC on GPU); nothing is read back.
        """
        self._set_lr(step)
        device = self.parts.device
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        if self.parts.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.parts.step(images, labels)

    def begin_epoch(self, epoch: int) -> None:
        """Seed the epoch's randomness and data order, set train mode and what is frozen (0-based `epoch`)."""
        parts, seed = self.parts, self.settings.seed
        seed_everything(_epoch_seed(seed, epoch, parts.context.rank))
        if parts.loader.generator is not None:
            parts.loader.generator.manual_seed(_epoch_seed(seed, epoch))
        for sampler in epoch_samplers(parts.loader):
            sampler.set_epoch(epoch)
        self._set_train_mode(epoch)
        parts.loss.set_epoch(epoch)  # e.g. the balance-degree gate's warm-up
        parts.step.refresh()

    def recorded_step(
        self, images: Tensor, labels: Tensor, step: int, tracker: LossTracker, diagnostics: EpochDiagnostics
    ) -> None:
        """`train_step` plus what the epoch loop keeps of it (loss and the loss's diagnostics, on the device)."""
        tracker.add(self.train_step(images, labels, step))
        diagnostics.update(self.parts.loss.last_stats)

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        self.begin_epoch(epoch)
        parts = self.parts
        tracker = LossTracker(parts.device)
        diagnostics = EpochDiagnostics(torch.from_numpy(parts.class_groups).to(parts.device))
        steps, images_seen = len(parts.loader), 0
        progress = tqdm(
            parts.loader,
            desc=f"epoch {epoch + 1}/{self.settings.epochs}",
            leave=False,
            disable=None if parts.context.is_main else True,
        )
        for step, (images, labels) in enumerate(progress):
            self.recorded_step(images, labels, epoch * steps + step, tracker, diagnostics)
            images_seen += len(images)
            if (step + 1) % CHECK_EVERY == 0 or step + 1 == steps:
                self._check_finite(tracker, epoch)
                progress.set_postfix(loss=f"{tracker.mean():.4f}")
        world_size = parts.context.world_size
        total_loss = parts.context.sum(tracker.total())  # the ranks' loss sums; the mean of their means
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "loss": float(total_loss) / max(tracker.steps * world_size, 1),
            "lr": parts.optimizer.param_groups[0]["lr"],
            "images": images_seen * world_size,
        }
        record.update(diagnostics.summary())
        return record

    def _check_finite(self, tracker: LossTracker, epoch: int) -> None:
        """Stop with the first non-finite loss's epoch and step (steps after it never reach a checkpoint)."""
        bad = tracker.first_non_finite()
        if bad is not None:
            step, value = bad
            raise UserError(
                f"the loss became {value} at epoch {epoch + 1}, step {step + 1}; nothing saved was "
                f"overwritten (checkpoints/last.pt holds epoch {epoch}); lower train.lr or the loss's scale"
            )

    def _set_train_mode(self, epoch: int) -> None:
        """Train mode, with the backbone frozen in its first epochs and BatchNorm frozen when configured."""
        model = self.parts.model
        model.train()
        frozen = epoch < self.settings.freeze_backbone_epochs
        if self.backbone is not None:
            self.backbone.requires_grad_(not frozen)
        if self.settings.freeze_bn or frozen:
            for module in model.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()  # running statistics stay as they are
                    module.requires_grad_(False)  # and so do the affine weight and bias

    def _set_lr(self, step: int) -> None:
        """Set every group's lr for the run's step `step` (see `LrSchedule`)."""
        factor = self.parts.schedule.factor(step)
        for group, base in zip(self.parts.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def _score(self, split: str) -> dict[str, float]:
        """Metrics of the current model on `val` or `test`, with per-group results on closed-set data."""
        return self.parts.evaluators[split](self.parts.model, self.parts.loss.proxies)

    def _evaluate_epoch(self) -> dict[str, float]:
        """Validation metrics (`val/...`), and test metrics (`test/...`) only when selected or logged on test."""
        scores = {}
        if "val" in self.parts.evaluators:
            scores.update({f"val/{key}": value for key, value in self._score("val").items()})
        if self.selection_split == "test" or self.settings.log_test:
            scores.update({f"test/{key}": value for key, value in self._score("test").items()})
        return scores

    def _save(self, epoch: int, record: dict[str, Any]) -> None:
        """Keep the selected weights; write `last.pt` (for a resume) and `best.pt` (rank 0, with a model config)."""
        parts, settings = self.parts, self.settings
        key = f"{self.selection_split}/{settings.select_on}"
        improved = key in record and record[key] > self.best_score
        if improved:
            self.best_score, self.best_epoch = record[key], epoch + 1
            self._best_weights = (_cpu_copy(parts.model.state_dict()), _cpu_copy(parts.loss.state_dict()))
        if not parts.context.is_main or settings.model_config is None:
            return
        checkpoint = Checkpoint(
            model=parts.model.state_dict(),
            model_config=settings.model_config,
            run_config=settings.run_config or {},
            num_classes=parts.data.num_classes,
            epoch=epoch,
            best_score=self.best_score,
            best_epoch=self.best_epoch,
            loss=parts.loss.state_dict(),
            optimizer=parts.optimizer.state_dict(),
        )
        checkpoint.save(self.files.checkpoints / "last.pt")
        # Without a selection split, the run's result is its last epoch: best.pt follows last.pt.
        if improved or self.selection_split is None:
            checkpoint.slim().save(self.files.checkpoints / "best.pt")

    def _final_result(self) -> TrainResult:
        """Test metrics of the selected weights, with per-query scores (`per_query.npz`) and their CIs."""
        parts, last_epoch = self.parts, self.settings.epochs
        chosen = self.best_epoch if self.selection_split is not None else last_epoch
        if chosen != last_epoch and self._best_weights is not None:  # every rank kept the same copy
            model_state, loss_state = self._best_weights
            parts.model.load_state_dict(model_state)
            parts.loss.load_state_dict(loss_state)
        test, scores = parts.evaluators["test"].score(parts.model, parts.loss.proxies)
        uncertainty = record_uncertainty(self.settings.run_dir, scores) if scores is not None else {}
        selection_value = self.best_score if self.selection_split is not None else None
        return TrainResult(chosen, self.selection_split or "last", test, selection_value, uncertainty)

    def _summary(self, record: dict[str, Any]) -> str:
        text = f"epoch {record['epoch']}/{self.settings.epochs}  loss {record['loss']:.4f}  lr {record['lr']:.2e}"
        for split in ("val", "test"):
            if f"{split}/recall@1" in record:
                text += f"  {split} R@1 {record[f'{split}/recall@1']:.4f} MAP@R {record[f'{split}/map@r']:.4f}"
        return text + describe_stats(record) + f"  ({record['seconds']:.1f}s, {record['images_per_second']:.0f} img/s)"


def _backbone(model: nn.Module, freeze_epochs: int) -> nn.Module | None:
    """The model's `backbone` submodule (None without one); required when its first epochs freeze it."""
    backbone = getattr(model, "backbone", None)
    if isinstance(backbone, nn.Module):
        return backbone
    if freeze_epochs > 0:
        raise UserError(
            f"train.freeze_backbone_epochs={freeze_epochs} freezes the model's `backbone` submodule, but "
            f"{type(model).__name__} has none; set freeze_backbone_epochs=0 or give the model a backbone"
        )
    return None


def _cpu_copy(state: StateDict) -> StateDict:
    """A copy of a state dict's tensors on the CPU (the selected weights, kept while training goes on)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in state.items()}
