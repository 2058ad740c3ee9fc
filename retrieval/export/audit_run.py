"""One audit, from an `AuditRequest` to its `AuditSummary`: what `retrieval audit` runs.

The images are a CSV's, embedded by the chosen model (`EncoderChoice`: a checkpoint or an export), or
the vectors and columns of an `index build` directory (no model). Their findings (`retrieval.audit.findings`)
are written as a report folder (`retrieval.audit.report`). What the request, the paths and the CSV show
is refused before a model library or cleanlab loads. In `export/`, as `index_build`: the layer that may
open either encoder (`retrieval.evaluate`, under it, reads the audit's copy check).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice, open_encoder

if TYPE_CHECKING:
    import numpy as np

    from retrieval.audit.catalogue import Catalogue
    from retrieval.audit.findings import AuditSummary
    from retrieval.audit.trust import Selection
    from retrieval.config import AuditConfig
    from retrieval.core.match_threshold import MatchThreshold
    from retrieval.inference.interface import Encoder

__all__ = ["AuditRequest", "run_audit"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditRequest:
    """The flags of `retrieval audit`, by name.

    Attributes:
        out: the report folder: new, empty, or an earlier report (replaced whole).
        settings: the config's `audit:` section (checks, thresholds, k, findings shown).
        csv: the images (`path[,label,split,...]`), embedded by `encoder`; or
        index: an `index build` directory whose vectors and columns are audited, with no model.
        encoder: the model for `csv` (`checkpoint` or `model`; none with `index`).
        batch_size, num_workers: loading while embedding.
    """

    out: Path
    settings: AuditConfig
    csv: Path | None = None
    index: Path | None = None
    encoder: EncoderChoice = field(default_factory=EncoderChoice)
    batch_size: int = 64
    num_workers: int = 0

    def __post_init__(self) -> None:
        if (self.csv is None) == (self.index is None):
            raise ValueError("an AuditRequest takes one of csv and index")

    @property
    def source(self) -> Path:
        """The CSV or the index directory audited."""
        source = self.csv or self.index
        assert source is not None  # __post_init__
        return source


def run_audit(request: AuditRequest) -> AuditSummary:
    """Audit the request's images and write its report folder; returns the summary written.

    Raises:
        UserError: the report folder, the model choice, the CSV, the model or the index cannot be used, or
            fewer than 2 images can be read.
    """
    from retrieval.audit.catalogue import read_catalogue
    from retrieval.audit.report import check_report_folder, write_report

    check_report_folder(request.out)  # before the model and the audit: a report that cannot be written costs nothing
    if request.index is None and not request.encoder.chosen:
        raise UserError("--csv needs --checkpoint CKPT or --model EXPORT_DIR to embed its images (or give --index)")
    if request.index is not None and request.encoder.chosen:
        raise UserError("--index audits the vectors it holds; drop --checkpoint/--model, or give --csv instead")
    catalogue = None if request.csv is None else read_catalogue(request.csv)  # a bad CSV fails at once
    request.encoder.check()  # before PyTorch loads: a checkpoint that is not there
    from retrieval.audit.findings import audit_embeddings  # cleanlab, scikit-learn: after every check above

    selection = None  # the checkpoint's model-selection record (no checkpoint: none)
    if catalogue is None:
        catalogue, embeddings, stored = _indexed(request.source)
    else:
        encoder, selection = _encoder(request.encoder)
        catalogue, embeddings = _embedded(request, encoder, catalogue)
        stored = encoder.match_threshold
    for note in catalogue.missing:
        _log.info(note)
    findings = audit_embeddings(embeddings, catalogue, request.settings, stored=stored, selection=selection)
    title = f"audit of {request.source.name}"
    return write_report(findings, embeddings, request.out, request.settings.show, title)


def _indexed(directory: Path) -> tuple[Catalogue, np.ndarray, MatchThreshold | None]:
    """The catalogue and vectors of an index directory; no model, so no stored match threshold."""
    from retrieval.audit.catalogue import index_catalogue
    from retrieval.index import SearchIndex

    catalogue, vectors = index_catalogue(SearchIndex.load(directory), directory)
    return catalogue, vectors, None


def _embedded(request: AuditRequest, encoder: Encoder, catalogue: Catalogue) -> tuple[Catalogue, np.ndarray]:
    """The CSV's readable images and their embeddings by the model."""
    from retrieval.inference.sources import report_unreadable

    _log.info("embedding %d images", len(catalogue))
    embedded = encoder.embed_files(catalogue.paths, request.batch_size, request.num_workers)
    report_unreadable(embedded.failures)
    if len(embedded.positions) < 2:
        raise UserError(f"fewer than 2 readable images in {request.csv}; an audit compares images with each other")
    return catalogue.subset(embedded.positions), embedded.embeddings


def _encoder(choice: EncoderChoice) -> tuple[Encoder, Selection | None]:
    """The chosen model's encoder, and the checkpoint's model-selection record (an export keeps none)."""
    if choice.checkpoint is None:
        return open_encoder(choice), None
    from retrieval.audit.trust import Selection
    from retrieval.checkpoint import Checkpoint

    checkpoint = Checkpoint.read(choice.checkpoint)  # read once: for its selection record and its model
    selection = Selection(checkpoint.config().train.select_on, checkpoint.best_score, checkpoint.best_epoch)
    return open_encoder(choice, checkpoint), selection
