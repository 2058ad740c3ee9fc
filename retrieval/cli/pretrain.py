"""`retrieval pretrain`: self-supervised pretraining of a backbone on unlabeled images, for `train` to start from.

    retrieval pretrain --images catalogue/ --config configs/csv_artwork.yaml --output-dir pre
    retrieval train --config configs/csv_artwork.yaml --set data.path=labeled.csv \\
        --set model.weights=pre/backbone.safetensors

Labels in a CSV, if any, are ignored. Give the config the later `train` runs: its `model` section
(backbone, input channels) and `data.image_size` are what is pretrained. `--resume RUN_DIR`
continues an interrupted run from its `checkpoints/last.pt` with its own images and config.
This module parses and prints; the run is `retrieval.pretrain.run` (a `PretrainRequest` in, a
`PretrainReport` out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.choices.splits import SPLITS
from retrieval.cli._common import add_config_arguments
from retrieval.cli._progress import showing_progress

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
    from retrieval.pretrain.run import PretrainRequest, check_pretraining, run_pretraining

    request = PretrainRequest(
        images=args.images,
        csv=args.csv,
        split=args.split,
        output_dir=args.output_dir,
        resume=args.resume,
        config=args.config,
        overrides=tuple(args.overrides),
    )
    images = check_pretraining(request)
    with showing_progress("pretrain") as log:
        log.info("loading PyTorch and timm ...")
        report = run_pretraining(request, images)
    if report.main_process:
        print(report.text())
    return 0
