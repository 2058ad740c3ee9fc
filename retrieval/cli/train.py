"""`retrieval train`: train an embedder and print the test Recall@K of the selected checkpoint.

The process-wide settings of a run (threads, deterministic algorithms, global seeds) are set here,
by `configure_process`, before each run's `Trainer` is built: the library never sets them.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_config_arguments, existing_checkpoint, seed_list
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.config import Config, TrainConfig
    from retrieval.runtime.distributed import DistributedContext
    from retrieval.train.result import RunResult

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("train", help="train an embedder (no arguments: the embedded digits demo)")
    add_config_arguments(parser)
    parser.add_argument("--output-dir", type=Path, help="run directory (default: runs/<data>-<loss>-<time>)")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR|CKPT",
        help="continue a run from its directory or its checkpoints/last.pt (same run directory)",
    )
    parser.add_argument(
        "--seeds",
        type=seed_list,
        metavar="0,1,2",
        help="train once per seed (run directories seed-N inside --output-dir) and print mean ± sd",
    )


def run(args: argparse.Namespace) -> int:
    """Train (or resume); the stage each run is in prints as it starts (`showing_progress`).

    What the arguments, the config and the dataset's files can tell is checked before PyTorch loads.
    """
    from retrieval.config import check_config  # pydantic: not for --help
    from retrieval.data.splits import check_training_files

    if args.seeds and args.resume:
        raise UserError("--seeds and --resume cannot be combined; resume one seed's run directory instead")
    if args.resume:
        existing_checkpoint(_resumed_path(args.resume))
    if args.output_dir is not None:
        refuse_file_in_the_way(args.output_dir, f"--output-dir {args.output_dir}")
    data = check_config(args.config, args.overrides)  # a typo fails at once, before seconds of imports
    if not args.resume or args.config:  # a resume without --config trains on the data its checkpoint records
        check_training_files(data)  # the files as training reads them: path, columns, splits
    with showing_progress("train") as log:
        log.info("loading PyTorch and timm ...")  # the first line, before the imports that take seconds
        return _resume(args) if args.resume else _train(args)


def _train(args: argparse.Namespace) -> int:
    from retrieval.config import load_config
    from retrieval.runtime.distributed import process_group
    from retrieval.train.trainer import Trainer

    config = load_config(args.config, args.overrides)
    with process_group(config.train.device) as context:
        run_dir = args.output_dir or _default_run_dir(config, context)
        if not args.seeds:
            _configure_process(config.train)
            result = Trainer.from_config(config, run_dir).fit()
            _print_result(config, run_dir, result, context)
            return 0
        results = []
        for seed in args.seeds:
            seeded = config.model_copy(update={"train": config.train.model_copy(update={"seed": seed})})
            if context.is_main:
                print(f"seed {seed}", flush=True)
            _configure_process(seeded.train)
            results.append(Trainer.from_config(seeded, run_dir / f"seed-{seed}").fit())
            _print_result(seeded, run_dir / f"seed-{seed}", results[-1], context)
        if context.is_main:
            print(_seed_summary(args.seeds, results))
        return 0


def _configure_process(train: TrainConfig) -> None:
    """Threads, determinism and seeds of the process, as section `train` sets them."""
    from retrieval.runtime.environment import configure_process

    configure_process(threads=train.threads, deterministic=train.deterministic, seed=train.seed)


def _resume(args: argparse.Namespace) -> int:
    """Continue an interrupted run; its own config applies unless --config is given, --set still applies.

    The selected weights so far come from the `best.pt` beside the `last.pt` resumed from.
    """
    from retrieval.checkpoint import Checkpoint
    from retrieval.runtime.distributed import process_group
    from retrieval.train.trainer import Trainer

    path = _resumed_path(args.resume)
    checkpoint = Checkpoint.read(path)
    if not checkpoint.resumable:
        raise UserError(
            f"{path} holds the weights for evaluation and indexing only (no optimizer state); "
            "resume from the run directory or its checkpoints/last.pt"
        )
    best_path = path.with_name("best.pt")
    best = Checkpoint.read(best_path) if best_path.is_file() else None
    config = checkpoint.config(args.config, args.overrides)
    run_dir = args.output_dir or path.resolve().parent.parent
    trained, epochs = checkpoint.epoch + 1, config.train.epochs
    complete = f"run already complete (epoch {trained} of {epochs})" if trained >= epochs else None
    with process_group(config.train.device) as context:
        if complete and context.is_main:
            logging.getLogger(__name__).info("%s: scoring its selected checkpoint again ...", complete)
        _configure_process(config.train)
        trainer = Trainer.from_config(config, run_dir, resuming=True)
        trainer.resume(checkpoint, best)
        result = trainer.fit()
        if complete and context.is_main:
            print(f"{complete}; its result:")
        _print_result(config, run_dir, result, context)
    return 0


def _resumed_path(resume: Path) -> Path:
    """The checkpoint `--resume RUN_DIR|CKPT` continues from: a run directory's `checkpoints/last.pt`."""
    return resume / "checkpoints" / "last.pt" if resume.is_dir() else resume


def _print_result(config: Config, run_dir: Path, result: RunResult, context: DistributedContext) -> None:
    """The closing lines, printed once (by rank 0 under torchrun)."""
    from retrieval.evaluate.evaluator import format_metrics
    from retrieval.evaluate.uncertainty import format_uncertainty

    if not context.is_main:
        return
    print(f"run directory: {run_dir}  (checkpoints/best.pt is the result)")
    print(result.describe(config.train.select_on))
    if result.uncertainty is not None:
        print(format_uncertainty(result.uncertainty, result.label))
    print(format_metrics(result.test, result.label))


def _seed_summary(seeds: list[int], results: list[RunResult]) -> str:
    """Mean ± sample standard deviation over seeds of each closing metric."""
    from retrieval.evaluate.evaluator import KS, closing_lines, format_mean_sd

    values = {key: format_mean_sd([r.test[key] for r in results]) for key in [*(f"recall@{k}" for k in KS), "map@r"]}
    header = f"over {len(seeds)} seeds ({', '.join(map(str, seeds))}), mean ± sd of the test metrics:"
    return header + "\n" + closing_lines(values, results[0].label)


def _default_run_dir(config: Config, context: DistributedContext) -> Path:
    """runs/<data>-<loss>-<time>, rank 0's clock: every process writes to (and rank 0 writes) the same one."""
    stamp = context.broadcast(time.strftime("%Y%m%d-%H%M%S"))
    return Path("runs") / f"{config.data.name}-{config.loss.name}-{stamp}"
