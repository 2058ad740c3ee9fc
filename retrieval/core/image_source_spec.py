"""`ImageSourceSpec`: which images a job reads, as its command named them, recorded so that a rerun reads the same.

One record for every job that must find its images again: `retrieval embed --out DIR/` keeps it in
`_job.json` and `_SUCCESS` (a rerun resumes parts of the same images only), and a pretraining run in
its `checkpoints/last.pt` (`pretrain --resume` reads the images it records). The images themselves,
read, are an `ImageSource` (`retrieval.inference.sources.spec_source`). Written with
`model_dump(exclude_unset=True)`: a spec reads back and writes out key for key, so the plain
`{"images": DIR}` and `{"csv": FILE, "split": SPLIT}` dicts older pretraining checkpoints stored are specs.
"""

from __future__ import annotations

from pydantic import ConfigDict

from retrieval.validation import Record

__all__ = ["ImageSourceSpec"]


class ImageSourceSpec(Record):
    """Images as a command named them: a CSV's rows (`csv`, `split`), a folder (`images`), or a dataset (`set`).

    Paths are as the command recorded them: `embed` resolves them, `pretrain` keeps what was typed.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    csv: str | None = None  # the CSV file (`--csv`)
    images: str | None = None  # the image folder (`--images`)
    set: list[str] | None = None  # `embed --set`: the data.* overrides of the checkpoint's data section
    split: str | None = None  # `--split`: which rows of the CSV or dataset (all when unset)
