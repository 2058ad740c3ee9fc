"""The files of a run directory: config, environment, per-epoch records and the result, each written whole.

`metrics.jsonl` grows by one whole line per epoch (`append_line`: flushed to disk); every other
file replaces its predecessor atomically (`write_text`), so a killed run never leaves half a file.
Only one process of a torchrun run (rank 0) writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from retrieval.core.epoch_record import METRICS_FILE, EpochRecord
from retrieval.runtime.files import append_line, write_text

__all__ = ["RunFiles"]


class RunFiles:
    """Reads and writes the records of the run directory `root`.

    Args:
        root: the run directory; created by `start`.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def metrics(self) -> Path:
        """`metrics.jsonl`: one JSON object per trained epoch."""
        return self.root / METRICS_FILE

    @property
    def plots(self) -> Path:
        """`plots/`: the run's figures."""
        return self.root / "plots"

    @property
    def checkpoints(self) -> Path:
        """`checkpoints/`: `last.pt` and `best.pt`."""
        return self.root / "checkpoints"

    def read_records(self, up_to_epoch: int) -> list[EpochRecord]:
        """The records of epochs 1..`up_to_epoch` already written (a resumed run keeps them); [] without a file.

        Raises:
            UserError: a line that is not an epoch record, naming the line and the field (`EpochRecord`).
        """
        if up_to_epoch == 0 or not self.metrics.is_file():
            return []
        return [record for record in EpochRecord.read(self.metrics) if record.epoch <= up_to_epoch]

    def start(
        self, environment: Mapping[str, object], config: Mapping[str, object] | None, records: Sequence[EpochRecord]
    ) -> None:
        """Create the directory; write `environment.json`, `config.yaml` (when given) and the kept `records`.

        `environment` and `config` are written as given (JSON and YAML): `describe_environment`'s and
        `config_to_dict`'s, each a record of its own maker.
        """
        self.plots.mkdir(parents=True, exist_ok=True)
        if config is not None:
            write_text(self.root / "config.yaml", yaml.safe_dump(dict(config), sort_keys=False))
        write_text(self.root / "environment.json", json.dumps(environment, indent=2) + "\n")
        write_text(self.metrics, "".join(record.line() + "\n" for record in records))

    def append_record(self, record: EpochRecord) -> None:
        """Add one epoch's record to `metrics.jsonl`."""
        append_line(self.metrics, record.line())
