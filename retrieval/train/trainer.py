"""The training loop: epochs, evaluation, honest model selection, checkpoints and records.

Model selection is honest: the result is the epoch with the best validation metric
(`select_on`), or the last epoch when there is no validation split. The test set is scored
once, at the end, on the selected weights; choosing on it needs `select_on_test`, and then every
test figure is labelled as selected on test.

With `train.ema`, the weight average (`retrieval.train.ema`) is scored beside the raw weights at
every evaluation (`ema/val/...`), and selection takes the better of the two (ties: the raw
weights); each evaluated record says which (`better_weights`), and `best.pt` and `result.json`
which was selected (`selected_weights`). Without a validation split the result is the last epoch's
average: asking for EMA is asking for the averaged weights.

The `Trainer` only runs the loop: the parts it drives (model, loss, loader, optimizer, schedule,
step, evaluators) come built in `TrainingRun` (`retrieval.train.builders`), its settings are the
config's `TrainConfig` (the one source of its defaults and checks, for a config file and for Python
alike). `Trainer.from_config(config, run_dir)` does both from a `Config`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from retrieval.checkpoint import Checkpoint, StateDict
from retrieval.config import Config, ConfigDocument, ModelConfig, TrainConfig, config_to_dict
from retrieval.core.epoch_record import EpochRecord, StepTimes
from retrieval.errors import UserError
from retrieval.evaluate.uncertainty import record_uncertainty
from retrieval.report.plots import plot_curves, plot_run
from retrieval.runtime.environment import describe_environment
from retrieval.train.accumulation import WHOLE_STEP, MicroBatch, optimizer_steps, plan_micro_batches
from retrieval.train.builders import TrainingRun, build_training
from retrieval.train.diagnostics import EpochDiagnostics, describe_stats
from retrieval.train.ema import WeightAverage
from retrieval.train.epoch_loop import epoch_batches, load_resume_part, seed_epoch
from retrieval.train.result import RunResult
from retrieval.train.run_files import RunFiles
from retrieval.train.step import LossTracker
from retrieval.train.trackers import Tracker, open_tracker, tracked

__all__ = ["Trainer"]

_log = logging.getLogger(__name__)

# Seconds between two redraws of plots/curves.png during training: a redraw costs 1-3 s of CPU (matplotlib's
# layout), more than a short run's epoch. The end of the run always draws every plot (`plot_run`).
CURVES_EVERY = 60.0

EMA_PREFIX = "ema/"  # the record keys of the weight average's scores: ema/val/recall@1, ...


class Trainer:
    """Trains `parts.model` with `parts.loss` as `train` says and writes the run directory `run_dir`.

    The run directory holds `config.yaml` (with a run config), `environment.json` (versions,
    threads, CPU), `metrics.jsonl` (one JSON object per epoch, with the seconds spent training,
    evaluating and writing, and the training images per second), `result.json` (the selected
    epoch's test metrics), `plots/*.png` and, with a model config, `checkpoints/last.pt`
    (everything a resume needs, every epoch) and `best.pt` (the selected weights, no optimizer state).
    Without a model config (a model the toolkit cannot rebuild) no checkpoint file is written; the
    selected epoch's weights are kept in memory either way, and the test set is scored on them at the end.
    `train.loggers` mirror the config, the records and the result to experiment trackers.

    The model needs only `forward(images) -> (B, D)`; `train.freeze_backbone_epochs > 0` also
    needs a `backbone` submodule (the part frozen first). Under torchrun (an initialized process
    group) every process trains its share of each global batch, evaluates its shard of each
    split, and only rank 0 writes files and prints.

    Building a `Trainer` changes no process-wide setting; `fit` reseeds the global generators at
    the start of every epoch from (seed, epoch, rank), the loop's contract for an exact resume.

    Args:
        parts: the built parts (`build_training`, `assemble_training`).
        train: the `train` config section: epochs, evaluation, selection, freezing, EMA and trackers.
        run_dir: where metrics.jsonl, result.json, environment.json, plots/ and checkpoints/ go.
        model_config: rebuilds the model from a checkpoint (`retrieval.checkpoint.Checkpoint`); None: no
            checkpoint files.
        run_config: the resolved config as plain dicts: config.yaml and the checkpoints' copy.

    Raises:
        UserError: `freeze_backbone_epochs > 0` for a model without a `backbone` submodule.
    """

    def __init__(
        self,
        parts: TrainingRun,
        train: TrainConfig,
        run_dir: Path,
        model_config: ModelConfig | None = None,
        run_config: ConfigDocument | None = None,
    ) -> None:
        self.parts = parts
        self.train = train
        self.run_dir = Path(run_dir)
        self.model_config = model_config
        self.run_config = run_config
        self.files = RunFiles(self.run_dir)
        self.backbone = _backbone(parts.model, train.freeze_backbone_epochs)
        self.base_lrs = [group["lr"] for group in parts.optimizer.param_groups]
        self.selection_split = "test" if train.select_on_test else ("val" if "val" in parts.evaluators else None)
        self.start_epoch, self.best_score, self.best_epoch = 0, -1.0, 0
        self.ema = WeightAverage(parts.model, parts.loss, train.ema) if train.ema else None
        # Without a selection split the result is the last epoch: its average when there is one.
        self.selected_weights: Literal["raw", "ema"] = (
            "ema" if self.ema is not None and self.selection_split is None else "raw"
        )
        self._best_weights: tuple[StateDict, StateDict] | None = None  # (model, loss) of the selected epoch, CPU
        self._curves_drawn = time.monotonic()  # when plots/curves.png was last drawn (CURVES_EVERY)

    @classmethod
    def from_config(cls, config: Config, run_dir: Path, resuming: bool = False) -> Trainer:
        """The trainer of the run `config` describes (`build_training`), writing to `run_dir`.

        Args:
            config: the resolved run config.
            run_dir: where the run's files go.
            resuming: the weights will come from a checkpoint (`resume`), so no pretrained weights are loaded.
        """
        parts = build_training(config, resuming)
        # The run records the P it trains with (`fitting_p`), so that a resume or an evaluation reads the same.
        run_config = config_to_dict(config.model_copy(update={"data": parts.loading}))
        return cls(parts, config.train, run_dir, config.model, run_config)

    def resume(self, checkpoint: Checkpoint, best: Checkpoint | None = None) -> None:
        """Continue from a loaded `last.pt`: weights, proxies, optimizer, EMA, loss scale, epoch and selection so far.

        Args:
            checkpoint: the run's `last.pt`.
            best: the run's `best.pt`; needed when the selected epoch so far is not `last.pt`'s.

        Raises:
            UserError: the selected weights are in neither checkpoint, or a part of `checkpoint` does not
                fit this run's (another model, loss or optimizer layout).
        """
        parts = self.parts
        load_resume_part("model", parts.model, checkpoint.model)
        load_resume_part("loss", parts.loss, checkpoint.loss)
        load_resume_part("optimizer", parts.optimizer, checkpoint.optimizer or {})
        if self.ema is not None:
            if checkpoint.ema is None:
                self.ema.reset()  # the run trained without EMA so far: the average starts now
            else:
                load_resume_part("ema", self.ema.averaged, checkpoint.ema)
        if parts.step.scaler is not None and checkpoint.grad_scaler is not None:
            parts.step.scaler.load_state_dict(checkpoint.grad_scaler)
        self.start_epoch = checkpoint.epoch + 1
        self.best_score, self.best_epoch = checkpoint.best_score, checkpoint.best_epoch
        if self.selection_split is not None:
            self.selected_weights = checkpoint.selected_weights
        if self.best_epoch:
            # last.pt holds the raw weights only; selected averaged weights are in best.pt
            in_last = self.best_epoch == self.start_epoch and self.selected_weights == "raw"
            selected = checkpoint if in_last else best
            if selected is None:
                raise UserError(
                    f"the run's selected epoch {self.best_epoch} is in checkpoints/best.pt, which is missing; "
                    "resume from a run directory that still holds it"
                )
            self._best_weights = (selected.model, selected.loss)

    def fit(self) -> RunResult:
        """Train all remaining epochs, then score the selected weights on the test set once."""
        context = self.parts.context
        records: list[EpochRecord] = context.broadcast(
            self.files.read_records(self.start_epoch) if context.is_main else []
        )
        if context.is_main:
            environment = describe_environment(self.parts.device) | {"world_size": context.world_size}
            self.files.start(environment, self.run_config, records)
        loggers = self.train.loggers if context.is_main else ()
        with tracked(open_tracker(loggers, self.run_dir), self.run_config) as tracker:
            if self.start_epoch < self.train.epochs:
                _log.info(
                    "training epochs %d-%d of %d on %s, %d batches each ...",
                    self.start_epoch + 1,
                    self.train.epochs,
                    self.train.epochs,
                    self.parts.device,
                    len(self.parts.loader),
                )
            self._train_epochs(records, tracker)
            if context.is_main and self.train.plots:
                plot_run(self.run_dir)
            _log.info("scoring the selected checkpoint on the test split ...")
            result = self._final_result()
            if context.is_main:
                result.write(self.run_dir)
                tracker.log_result(result.model_dump(mode="json", by_alias=True))
        return result

    def _train_epochs(self, records: list[EpochRecord], tracker: Tracker) -> None:
        """Train, evaluate, save and record every remaining epoch."""
        context, epochs = self.parts.context, self.train.epochs
        for epoch in range(self.start_epoch, epochs):
            started = time.perf_counter()
            record, images = self._train_epoch(epoch)
            trained = time.perf_counter()
            if (epoch + 1) % self.train.eval_every == 0 or epoch + 1 == epochs:
                record = record.with_scores(self._evaluate_epoch())
            evaluated = time.perf_counter()
            self._save(epoch, record)
            if context.is_main and self.train.plots and time.monotonic() - self._curves_drawn >= CURVES_EVERY:
                plot_curves(records + [record], self.files.plots / "curves.png")  # the diagnostics: at the end
                self._curves_drawn = time.monotonic()
            written = time.perf_counter()
            record.time = StepTimes(
                train=round(trained - started, 3),
                eval=round(evaluated - trained, 3),
                write=round(written - evaluated, 3),
            )
            record.images_per_second = round(images / max(trained - started, 1e-9), 1)
            record.seconds = round(written - started, 3)
            records.append(record)
            if context.is_main:
                self.files.append_record(record)
                tracker.log_record(record.model_dump(mode="json", exclude_none=True))
                print(self._summary(record), flush=True)  # one line per epoch, also when stdout is a file

    def train_step(self, images: Tensor, labels: Tensor, step: int, micro: MicroBatch = WHOLE_STEP) -> Tensor:
        """One micro-batch of the run's global optimizer step `step`; returns its loss, on the device.

        The first micro-batch of a step sets the lr for `step` and clears the gradients; the last one
        steps the optimizer and then updates the weight average. By default the batch is a whole step.
        The batch is moved to the device (NHWC on GPU); nothing is read back.
        """
        parts = self.parts
        if micro.first:
            self._set_lr(step)
            parts.step.zero_grad()
        device = parts.device
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        if parts.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        loss = parts.step.forward_backward(images, labels, micro.weight, sync=micro.last)
        if micro.last:
            parts.step.apply()
            if self.ema is not None:
                self.ema.update(step + 1)
        return loss

    def begin_epoch(self, epoch: int) -> None:
        """Seed the epoch's randomness and data order, set train mode and what is frozen (0-based `epoch`)."""
        parts = self.parts
        seed_epoch(parts.loader, self.train.seed, epoch, parts.context.rank)
        self._set_train_mode(epoch)
        parts.loss.set_epoch(epoch)  # e.g. the balance-degree gate's warm-up
        parts.step.refresh()

    def recorded_step(
        self,
        images: Tensor,
        labels: Tensor,
        step: int,
        tracker: LossTracker,
        diagnostics: EpochDiagnostics,
        micro: MicroBatch = WHOLE_STEP,
    ) -> None:
        """`train_step` plus what the epoch loop keeps of it (loss and the loss's diagnostics, on the device)."""
        tracker.add(self.train_step(images, labels, step, micro))
        diagnostics.update(self.parts.loss.last_stats)

    def _train_epoch(self, epoch: int) -> tuple[EpochRecord, int]:
        """One pass over the training data: the epoch's record (no scores yet) and the images it trained on."""
        self.begin_epoch(epoch)
        parts = self.parts
        scaler = parts.step.scaler
        tracker = LossTracker(parts.device, skip_non_finite=scaler is not None)
        diagnostics = EpochDiagnostics(torch.from_numpy(parts.class_groups).to(parts.device))
        batches, accumulate = len(parts.loader), parts.step.accumulate_steps
        plan, steps = plan_micro_batches(batches, accumulate), optimizer_steps(batches, accumulate)
        skipped_before, images_seen = parts.step.skipped_steps.clone(), 0
        advice = (
            f"nothing saved was overwritten (checkpoints/last.pt holds epoch {epoch}); "
            "lower train.lr or the loss's scale"
        )
        shown = parts.context.is_main
        for index, (images, labels) in epoch_batches(parts.loader, tracker, epoch, self.train.epochs, advice, shown):
            step, micro = plan[index]
            self.recorded_step(images, labels, epoch * steps + step, tracker, diagnostics, micro)
            images_seen += len(images)
        context = parts.context
        total_loss, count = context.sum(tracker.total()), context.sum(tracker.count())  # the mean of all ranks' losses
        record = EpochRecord(
            epoch=epoch + 1,
            loss=float(total_loss) / max(float(count), 1.0),
            lr=parts.optimizer.param_groups[0]["lr"],
            **dict(diagnostics.summary()),
        )
        if scaler is not None:
            record.skipped_steps = int(parts.step.skipped_steps - skipped_before)
            record.loss_scale = scaler.get_scale()
            self._check_scaled_steps(record.skipped_steps, record.loss_scale, steps, epoch)
        return record, images_seen * context.world_size

    def _check_scaled_steps(self, skipped: int, scale: float, steps: int, epoch: int) -> None:
        """fp16: stop when every step of the epoch overflowed even at a loss scale below 1 (the run diverged).

        Skipped steps are how the scaler finds its scale (the first few of a run always are); only
        gradients that overflow without any scaling up are not its doing.
        """
        if skipped == steps and scale < 1.0:
            raise UserError(
                f"train.amp=fp16: every one of the {steps} steps of epoch {epoch + 1} had inf or NaN gradients even "
                f"at a loss scale of {scale:.3g} and was skipped; nothing saved was overwritten "
                f"(checkpoints/last.pt holds epoch {epoch}); lower train.lr, or use train.amp=bf16 (GPUs that have it)"
            )

    def _set_train_mode(self, epoch: int) -> None:
        """Train mode, with the backbone frozen in its first epochs and BatchNorm frozen when configured."""
        model = self.parts.model
        model.train()
        frozen = epoch < self.train.freeze_backbone_epochs
        if self.backbone is not None:
            self.backbone.requires_grad_(not frozen)
        if self.train.freeze_bn or frozen:
            for module in model.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()  # running statistics stay as they are
                    module.requires_grad_(False)  # and so do the affine weight and bias

    def _set_lr(self, step: int) -> None:
        """Set every group's lr for the run's step `step` (see `LrSchedule`)."""
        factor = self.parts.schedule.factor(step)
        for group, base in zip(self.parts.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def _score(self, split: str, model: nn.Module, proxies: Tensor | None) -> dict[str, float]:
        """Metrics of `model` on `val` or `test`, with per-group results on closed-set data."""
        return self.parts.evaluators[split](model, proxies)

    def _candidates(self) -> dict[str, tuple[nn.Module, Tensor | None]]:
        """The weights each evaluation scores, by record-key prefix: the raw ones and, with EMA, the average."""
        candidates = {"": (self.parts.model, self.parts.loss.proxies)}
        if self.ema is not None:
            candidates[EMA_PREFIX] = (self.ema.model, self.ema.proxies)
        return candidates

    def _evaluate_epoch(self) -> dict[str, float]:
        """Validation metrics (`val/...`), and test metrics (`test/...`) only when selected or logged on test.

        With EMA, the same for the weight average under `ema/` (`ema/val/...`).
        """
        splits = ["val"] if "val" in self.parts.evaluators else []
        if self.selection_split == "test" or self.train.log_test:
            splits.append("test")
        scores = {}
        for prefix, (model, proxies) in self._candidates().items():
            for split in splits:
                scores.update(
                    {f"{prefix}{split}/{key}": value for key, value in self._score(split, model, proxies).items()}
                )
        return scores

    def _select(self, epoch: int, record: EpochRecord) -> bool:
        """Keep this epoch's weights if they beat the selection so far; with EMA, the better of raw and average.

        Returns whether they did. The better weights of the epoch go into the record (`better_weights`).
        """
        scores = record.scores
        key = f"{self.selection_split}/{self.train.select_on}"
        if key not in scores:
            return False
        weights: Literal["raw", "ema"] = "raw"
        score = scores[key]
        if self.ema is not None:
            if scores[EMA_PREFIX + key] > score:
                weights, score = "ema", scores[EMA_PREFIX + key]
            record.better_weights = weights
        if score <= self.best_score:
            return False
        self.best_score, self.best_epoch, self.selected_weights = score, epoch + 1, weights
        model_state, loss_state = self._weights(weights)
        self._best_weights = (_cpu_copy(model_state), _cpu_copy(loss_state))
        return True

    def _weights(self, kind: str) -> tuple[StateDict, StateDict]:
        """The current (model, loss) state dicts of the `raw` weights or of their average (`ema`)."""
        if kind == "ema":
            assert self.ema is not None  # only selected when there is one
            return self.ema.weights()
        return self.parts.model.state_dict(), self.parts.loss.state_dict()

    def _save(self, epoch: int, record: EpochRecord) -> None:
        """Select; write `last.pt` (for a resume) and `best.pt` (the selected weights; rank 0, with a model config)."""
        parts = self.parts
        improved = self._select(epoch, record)
        if not parts.context.is_main or self.model_config is None:
            return
        scaler = parts.step.scaler
        checkpoint = Checkpoint(
            model=parts.model.state_dict(),
            model_config=self.model_config,
            run_config=self.run_config or {},
            num_classes=parts.data.num_classes,
            epoch=epoch,
            best_score=self.best_score,
            best_epoch=self.best_epoch,
            loss=parts.loss.state_dict(),
            optimizer=parts.optimizer.state_dict(),
            selected_weights=self.selected_weights,
            ema=None if self.ema is None else self.ema.averaged.state_dict(),
            grad_scaler=None if scaler is None else scaler.state_dict(),
        )
        checkpoint.save(self.files.checkpoints / "last.pt")
        # Without a selection split, the run's result is its last epoch: best.pt follows last.pt.
        if improved or self.selection_split is None:
            model_state, loss_state = self._weights(self.selected_weights)
            selected = dataclasses.replace(checkpoint, model=model_state, loss=loss_state)
            selected.slim().save(self.files.checkpoints / "best.pt")

    def _final_result(self) -> RunResult:
        """Test metrics of the selected weights, with per-query scores (`per_query.npz`) and their CIs."""
        parts, last_epoch = self.parts, self.train.epochs
        chosen = self.best_epoch if self.selection_split is not None else last_epoch
        selected = None
        if chosen != last_epoch:
            selected = self._best_weights  # every rank kept the same copy
        elif self.selected_weights == "ema":
            selected = self._weights("ema")
        if selected is not None:
            model_state, loss_state = selected
            parts.model.load_state_dict(model_state)
            parts.loss.load_state_dict(loss_state)
        test, scores = parts.evaluators["test"].score(parts.model, parts.loss.proxies)
        uncertainty = record_uncertainty(self.run_dir, scores) if scores is not None else None
        selection_value = self.best_score if self.selection_split is not None else None
        split = self.selection_split or "last"
        return RunResult.model_validate(
            {
                "epoch": chosen,
                "selected_on": split,
                "test": test,
                "selection_value": selection_value,
                "uncertainty": uncertainty,
                "selected_weights": self.selected_weights,
            }
        )

    def _summary(self, record: EpochRecord) -> str:
        text = f"epoch {record.epoch}/{self.train.epochs}  loss {record.loss:.4f}  lr {record.lr:.2e}"
        scores = record.scores
        for prefix in self._candidates():
            for split in ("val", "test"):
                if f"{prefix}{split}/recall@1" in scores:
                    name = f"{prefix}{split}".replace("/", " ")
                    recall, map_r = scores[f"{prefix}{split}/recall@1"], scores[f"{prefix}{split}/map@r"]
                    text += f"  {name} R@1 {recall:.4f} MAP@R {map_r:.4f}"
        if record.skipped_steps is not None:
            text += f"  fp16 skipped {record.skipped_steps} (scale {record.loss_scale:.0f})"
        return text + describe_stats(record) + f"  ({record.seconds:.1f}s, {record.images_per_second:.0f} img/s)"


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
