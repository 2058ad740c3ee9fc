"""`retrieval train` as one function: a run, one run a seed, or a resumed run, from a `TrainRequest`.

`check_training_request` answers what the request, the config and the dataset's files can tell
without PyTorch; `run_training` trains and returns a `TrainingReport`, saying each run's closing lines
as the run ends (`say`: `print` for the command line). Run directories: `--output-dir`, else
`runs/<data>-<loss>-<time>`; with seeds, `seed-N` inside it (`seed_run_dir`, as `retrieval sweep`
names its cells' runs). A resume continues the `last.pt` of a run directory with the `best.pt` beside
it (`retrieval.train.resume`).

Each run sets the process's threads, deterministic algorithms and global seeds from its section
`train` before its `Trainer` is built, as a command's entry does: the trainer itself never sets them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.config import check_config
from retrieval.data.splits import check_training_files
from retrieval.errors import UserError
from retrieval.runtime.checkpoint_files import existing_checkpoint
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.config import Config
    from retrieval.runtime.distributed import DistributedContext
    from retrieval.train.result import RunResult

__all__ = [
    "TrainRequest",
    "TrainedRun",
    "TrainingReport",
    "check_training_request",
    "configure_run_process",
    "resumed_checkpoint",
    "run_training",
    "seed_run_dir",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRequest:
    """What to train: the flags of `retrieval train`, by name.

    Attributes:
        config, overrides: the config file (the digits demo when None) and `section.key=value` overrides.
        output_dir: the run directory (default: `runs/<data>-<loss>-<time>`; a resume's own directory).
        resume: a run directory or its `checkpoints/last.pt` to continue; its own config applies unless
            `config` is given, and `overrides` apply either way.
        seeds: train once per seed, each in `seed-N` inside the run directory (empty: once, with `train.seed`).

    Raises:
        UserError: `seeds` with `resume` (worded with the flags of `retrieval train`).
        ValueError: seeds that are not distinct integers >= 0.
    """

    config: str | None = None
    overrides: tuple[str, ...] = ()
    output_dir: Path | None = None
    resume: Path | None = None
    seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.seeds and self.resume:
            raise UserError("--seeds and --resume cannot be combined; resume one seed's run directory instead")
        if any(seed < 0 for seed in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct integers >= 0, got {self.seeds}")


@dataclass(frozen=True)
class TrainedRun:
    """One finished run: its directory, its result, and what its checkpoint was selected on.

    Attributes:
        run_dir: the run directory.
        result: the selected checkpoint's epoch and test metrics (`result.json`).
        select_on: the selection metric (`train.select_on`), named in the result's line.
        seed: the run's seed when the request trained several; None for a single run.
    """

    run_dir: Path
    result: RunResult
    select_on: str
    seed: int | None = None

    def text(self) -> str:
        """The run's closing lines: its directory, the selection, the 95% intervals, then Recall@K and MAP@R."""
        from retrieval.evaluate.evaluator import format_metrics
        from retrieval.evaluate.uncertainty import format_uncertainty

        result = self.result
        lines = [f"run directory: {self.run_dir}  (checkpoints/best.pt is the result)", result.describe(self.select_on)]
        if result.uncertainty is not None:
            lines.append(format_uncertainty(result.uncertainty, result.label))
        return "\n".join([*lines, format_metrics(result.test, result.label)])


@dataclass(frozen=True)
class TrainingReport:
    """What `run_training` trained: one run, or one a seed in the order of the request's seeds."""

    runs: list[TrainedRun]

    def seed_summary(self) -> str:
        """Mean ± sample standard deviation over the runs of each closing metric, headed by the seeds."""
        from retrieval.evaluate.evaluator import KS, closing_lines
        from retrieval.evaluate.uncertainty import format_mean_sd

        keys = [*(f"recall@{k}" for k in KS), "map@r"]
        values = {key: format_mean_sd([run.result.test[key] for run in self.runs]) for key in keys}
        seeds = ", ".join(str(run.seed) for run in self.runs)
        header = f"over {len(self.runs)} seeds ({seeds}), mean ± sd of the test metrics:"
        return header + "\n" + closing_lines(values, self.runs[0].result.label)


def resumed_checkpoint(resume: Path) -> Path:
    """The checkpoint `--resume RUN_DIR|CKPT` continues from: a run directory's `checkpoints/last.pt`, or the file.

    Raises:
        UserError: no file there.
    """
    return existing_checkpoint(resume / "checkpoints" / "last.pt" if resume.is_dir() else resume)


def seed_run_dir(root: Path, seed: int) -> Path:
    """The run directory of seed `seed` among runs of several seeds in `root`: `root/seed-N`."""
    return root / f"seed-{seed}"


def check_training_request(request: TrainRequest) -> None:
    """Refuse what the request, the config and the dataset's files tell is wrong, without PyTorch.

    A resume without a config file trains on the data its checkpoint records, read once PyTorch is loaded.

    Raises:
        UserError: no checkpoint to resume, a file where the run directory would go, a config mistake,
            or the dataset's files as training reads them (path, columns, splits).
    """
    if request.resume:
        resumed_checkpoint(request.resume)
    if request.output_dir is not None:
        refuse_file_in_the_way(request.output_dir, f"--output-dir {request.output_dir}")
    data = check_config(request.config, request.overrides)
    if not request.resume or request.config:
        check_training_files(data)


def run_training(request: TrainRequest, say: Callable[[str], None] = print) -> TrainingReport:
    """Train (or resume) in this process and every one torchrun started; rank 0 writes and says the results.

    Args:
        request: what to train.
        say: given each run's closing lines as the run ends (and `seed N` as a seed's run starts, the
            summary over seeds at the end), on rank 0 only.
    """
    from retrieval.config import load_config
    from retrieval.runtime.distributed import process_group

    if request.resume:
        return TrainingReport([_resume(request.resume, request, say)])
    config = load_config(request.config, request.overrides)
    with process_group(config.train.device) as context:
        said = say if context.is_main else _silent
        run_dir = request.output_dir or _default_run_dir(config, context)
        if not request.seeds:
            return TrainingReport([_fit(config, run_dir, None, said)])
        runs = []
        for seed in request.seeds:
            seeded = config.model_copy(update={"train": config.train.model_copy(update={"seed": seed})})
            said(f"seed {seed}")
            runs.append(_fit(seeded, seed_run_dir(run_dir, seed), seed, said))
        report = TrainingReport(runs)
        said(report.seed_summary())
        return report


def _fit(config: Config, run_dir: Path, seed: int | None, say: Callable[[str], None]) -> TrainedRun:
    """Train one run from scratch and say its closing lines."""
    from retrieval.train.trainer import Trainer

    configure_run_process(config)
    run = TrainedRun(run_dir, Trainer.from_config(config, run_dir).fit(), config.train.select_on, seed)
    say(run.text())
    return run


def _resume(resume: Path, request: TrainRequest, say: Callable[[str], None]) -> TrainedRun:
    """Continue the run `resume`; a complete one is scored again, and said to have been complete."""
    from retrieval.runtime.distributed import process_group
    from retrieval.train.resume import resume_point
    from retrieval.train.trainer import Trainer

    point = resume_point(resumed_checkpoint(resume), request.config, request.overrides, request.output_dir)
    with process_group(point.config.train.device) as context:
        complete = point.complete if context.is_main else None
        if complete:
            _log.info("%s: scoring its selected checkpoint again ...", complete)
        configure_run_process(point.config)
        trainer = Trainer.from_config(point.config, point.run_dir, resuming=True)
        trainer.resume(point.last, point.best)
        run = TrainedRun(point.run_dir, trainer.fit(), point.config.train.select_on)
        if complete:
            say(f"{complete}; its result:")
        if context.is_main:
            say(run.text())
    return run


def configure_run_process(config: Config) -> None:
    """Set the process's threads, deterministic algorithms and global seeds as section `train` asks (process-wide)."""
    from retrieval.runtime.environment import configure_process

    train = config.train
    configure_process(threads=train.threads, deterministic=train.deterministic, seed=train.seed)


def _default_run_dir(config: Config, context: DistributedContext) -> Path:
    """runs/<data>-<loss>-<time>, rank 0's clock: every process writes to (and rank 0 writes) the same one."""
    stamp = context.broadcast(time.strftime("%Y%m%d-%H%M%S"))
    return Path("runs") / f"{config.data.name}-{config.loss.name}-{stamp}"


def _silent(line: str) -> None:
    """What the processes other than rank 0 say: nothing."""
