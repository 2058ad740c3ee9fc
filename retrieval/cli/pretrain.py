"""`retrieval pretrain`: self-supervised pretraining of a backbone on unlabeled images, for `train` to start from.

    retrieval pretrain --images catalogue/ --config configs/csv_artwork.yaml --output-dir pre
    retrieval train --config configs/csv_artwork.yaml --set data.path=labeled.csv \\
        --set model.weights=pre/backbone.safetensors

Labels in a CSV, if any, are ignored. Give the config the later `train` runs: its `model` section
(backbone, input channels) and `data.image_size` are what is pretrained. `--resume RUN_DIR`
continues an interrupted run from its `checkpoints/last.pt` with its own images and config.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.choices.splits import SPLITS
from retrieval.cli._common import add_config_arguments
from retrieval.cli._progress import showing_progress
from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.inference.sources import ImageSource

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "pretrain", help="self-supervised pretraining of the backbone on unlabeled images (for model.weights)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--images", type=Path, metavar="DIR", help="every image under this folder (recursively)")
    source.add_argument("--csv", type=Path, metavar="FILE", help="the images of a CSV's path column (labels ignored)")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="all",
        help="--csv rows to use: all (default), a split, or gallery (the test images queries search)",
    )
    add_config_arguments(parser)
    parser.add_argument("--output-dir", type=Path, help="run directory: backbone.safetensors, checkpoints/, records")
    parser.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run (its images and config)"
    )


def run(args: argparse.Namespace) -> int:
    """Pretrain (or resume), then print where the weights are and the `train` command that loads them.

    The arguments, the config and the images (or the checkpoint resumed) are checked before PyTorch loads.
    """
    from retrieval.config import check_config
    from retrieval.pretrain.resume_path import resumed_checkpoint

    if args.resume is None and (args.output_dir is None or (args.images is None and args.csv is None)):
        raise UserError(
            "retrieval pretrain needs --images DIR or --csv FILE, and --output-dir DIR (or --resume RUN_DIR)"
        )
    if args.resume is not None and (args.images is not None or args.csv is not None):
        raise UserError("--resume takes the run's own images; leave out --images and --csv")
    if args.output_dir is not None:
        refuse_file_in_the_way(args.output_dir, f"--output-dir {args.output_dir}")
    check_config(args.config, args.overrides)
    given = None  # a new run's source and its images; a resume reads those it records once PyTorch is loaded
    if args.resume is None:
        source = {"csv": str(args.csv), "split": args.split} if args.csv is not None else {"images": str(args.images)}
        given = source, _images(source)
    else:
        resumed_checkpoint(args.resume)
    with showing_progress("pretrain") as log:
        log.info("loading PyTorch and timm ...")
        return _run(args, given)


def _run(args: argparse.Namespace, given: tuple[dict[str, str], ImageSource] | None) -> int:
    """Pretrain on the `given` source and its images, or resume `--resume` with those it records."""
    from retrieval.config import config_with_overrides, load_config
    from retrieval.pretrain.pretrainer import PretrainCheckpoint, Pretrainer
    from retrieval.pretrain.resume_path import resumed_checkpoint
    from retrieval.runtime.distributed import process_group
    from retrieval.runtime.environment import configure_process

    state = None
    if given is None:
        state = PretrainCheckpoint.read(resumed_checkpoint(args.resume))
        source, images = dict(state.source), _images(state.source)
        config = (
            load_config(args.config, args.overrides)
            if args.config
            else config_with_overrides(dict(state.config), args.overrides)
        )
        run_dir = args.output_dir or args.resume
    else:
        (source, images), config, run_dir = given, load_config(args.config, args.overrides), args.output_dir
    with process_group(config.train.device) as context:
        configure_process(
            threads=config.train.threads, deterministic=config.train.deterministic, seed=config.train.seed
        )
        pretrainer = Pretrainer(config, images.paths, run_dir, source, context)
        if state is not None:
            pretrainer.resume(state)
        result = pretrainer.fit()
        if context.is_main:
            config_flag = f" --config {args.config}" if args.config else ""
            print(
                f"pretrained {result.epochs} epochs on {result.images} images "
                f"({result.image_steps} image-views), last loss {result.loss:.4f}"
            )
            print(f"backbone weights: {result.weights}")
            print(f"next: retrieval train{config_flag} --set model.weights={result.weights}")
    return 0


def _images(source: Mapping[str, str]) -> ImageSource:
    """The images of a pretraining source, `{"images": DIR}` or `{"csv": FILE, "split": SPLIT}` (torch-free)."""
    from retrieval.inference.sources import read_source

    csv = source.get("csv")
    return read_source(Path(csv) if csv else None, None if csv else Path(source["images"]), source.get("split", "all"))
