"""A pretraining run, new or resumed, from a `PretrainRequest`: the flags of `retrieval pretrain`, by name.

`check_pretraining` answers what the request, the config and the images (or the checkpoint resumed)
can tell without PyTorch, and reads a new run's images; `run_pretraining` trains and reports where the
backbone's weights are. A resume reads the images and the config its `checkpoints/last.pt` records
(`--config` and `--set` still apply), so it needs only the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.choices.splits import SPLITS
from retrieval.config import check_config
from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.errors import UserError
from retrieval.inference.sources import ImageSource, spec_source
from retrieval.pretrain.resume_path import resumed_checkpoint
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.config import Config
    from retrieval.pretrain.pretrainer import PretrainCheckpoint, PretrainResult

__all__ = ["PretrainReport", "PretrainRequest", "check_pretraining", "run_pretraining"]


@dataclass(frozen=True)
class PretrainRequest:
    """What to pretrain on and where: a new run's images (`images` or `csv` with `split`), or a run to `resume`.

    Attributes:
        images: every image under this folder; or `csv`, the images of a CSV's path column (labels
            ignored), its rows of `split` (all, a split, or gallery).
        output_dir: the run directory (a resume's own directory when None).
        resume: a pretraining run directory to continue, with its own images.
        config, overrides: the config file and `section.key=value` overrides (over the resumed run's
            own config when resuming without `config`).

    A request that cannot apply is worded with the flags of `retrieval pretrain`, the one place users make it.

    Raises:
        UserError: neither images nor a run to resume, no output directory for a new run, or images
            given with a resume.
        ValueError: `split` is not one of `SPLITS`.
    """

    images: Path | None = None
    csv: Path | None = None
    split: str = "all"
    output_dir: Path | None = None
    resume: Path | None = None
    config: str | None = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        given = self.images is not None or self.csv is not None
        if self.resume is None and (self.output_dir is None or not given):
            raise UserError(
                "retrieval pretrain needs --images DIR or --csv FILE, and --output-dir DIR (or --resume RUN_DIR)"
            )
        if self.resume is not None and given:
            raise UserError("--resume takes the run's own images; leave out --images and --csv")

    def run_dir(self) -> Path:
        """Where the run's files go: `output_dir`, or the resumed run's own directory."""
        directory = self.output_dir or self.resume
        assert directory is not None  # __post_init__ refuses a request with neither
        return directory

    def source(self) -> ImageSourceSpec:
        """A new run's images as given, the spec its checkpoints record for a resume."""
        if self.csv is not None:
            return ImageSourceSpec(csv=str(self.csv), split=self.split)
        return ImageSourceSpec(images=str(self.images))


@dataclass(frozen=True)
class PretrainReport:
    """What a pretraining run reports: its result, and the `train` command that loads its weights.

    Attributes:
        result: the weights file, the epochs, images and image-views trained, and the last loss.
        config: the request's config file, which the `train` command it suggests takes too.
        main_process: whether this process is rank 0 (or the only one), the one that prints.
    """

    result: PretrainResult
    config: str | None
    main_process: bool

    def text(self) -> str:
        """The closing lines of `retrieval pretrain`: what was trained, where the weights are, what to run next."""
        result, config_flag = self.result, f" --config {self.config}" if self.config else ""
        return (
            f"pretrained {result.epochs} epochs on {result.images} images "
            f"({result.image_steps} image-views), last loss {result.loss:.4f}\n"
            f"backbone weights: {result.weights}\n"
            f"next: retrieval train{config_flag} --set model.weights={result.weights}"
        )


def check_pretraining(request: PretrainRequest) -> ImageSource | None:
    """Refuse what the request, the config and the images tell is wrong, without PyTorch; a new run's images.

    A resume's images are those its checkpoint records, read by `run_pretraining` (None here).

    Raises:
        UserError: a file where the output folder would go, a config mistake, no images to read, or no
            pretraining checkpoint in the run directory resumed.
    """
    if request.output_dir is not None:
        refuse_file_in_the_way(request.output_dir, f"--output-dir {request.output_dir}")
    check_config(request.config, request.overrides)
    if request.resume is not None:
        resumed_checkpoint(request.resume)
        return None
    return spec_source(request.source())


def run_pretraining(request: PretrainRequest, images: ImageSource | None = None) -> PretrainReport:
    """Pretrain, or continue the run `request.resume`, in this process and every one torchrun started.

    Sets the process's threads, determinism and seeds from section `train`, as a command's entry does.

    Args:
        request: what to pretrain on and where.
        images: a new run's images when `check_pretraining` read them already (read here when None).
    """
    from retrieval.pretrain.pretrainer import Pretrainer
    from retrieval.runtime.distributed import process_group
    from retrieval.train.runs import configure_run_process

    state, spec, config, run_dir = _starting_point(request)
    if state is not None or images is None:
        images = spec_source(spec)
    with process_group(config.train.device) as context:
        configure_run_process(config)
        pretrainer = Pretrainer(config, images.paths, run_dir, spec, context)
        if state is not None:
            pretrainer.resume(state)
        return PretrainReport(pretrainer.fit(), request.config, context.is_main)


def _starting_point(request: PretrainRequest) -> tuple[PretrainCheckpoint | None, ImageSourceSpec, Config, Path]:
    """The checkpoint resumed (None for a new run), the images' spec, the config and the run directory."""
    from retrieval.config import config_with_overrides, load_config
    from retrieval.pretrain.pretrainer import PretrainCheckpoint

    if request.resume is None:
        return None, request.source(), load_config(request.config, request.overrides), request.run_dir()
    state = PretrainCheckpoint.read(resumed_checkpoint(request.resume))
    config = (
        load_config(request.config, request.overrides)
        if request.config
        else config_with_overrides(dict(state.config), request.overrides)
    )
    return state, state.source, config, request.run_dir()
