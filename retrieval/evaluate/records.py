"""The records `retrieval evaluate` writes: `EvaluationRecord` (`--json`), `ProxyClassification` (`--classification`).

Each is one pydantic model whose JSON (`model_dump_json`, unset optional entries left out, NaN kept as
NaN) is the layout these files have always had: `--json` holds the metrics at the top level, then
one entry per option that ran (`uncertainty`, `rerank`, `calibration`, `classification`,
`verification`, `leaks`).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from retrieval.evaluate.proxy_classifier import Calibration
from retrieval.evaluate.rerank_choice import RerankRecord
from retrieval.evaluate.uncertainty import Uncertainty
from retrieval.evaluate.verification import VerificationReport
from retrieval.metrics.classification import CalibrationSummary, ClassificationReport
from retrieval.validation import Record

__all__ = ["CalibratedSummary", "ClassificationNote", "EvaluationRecord", "LeakNote", "ProxyClassification"]


class _Tempered(Record):
    temperature: float  # the softmax temperature the summary is of


class _Scaled(Record):
    logit_scale: float  # the loss's scale s of softmax(s * cos(f, P))


class CalibratedSummary(CalibrationSummary, _Tempered):
    """The test images' calibration after temperature scaling, `temperature` first (the last base's fields lead)."""


class ProxyClassification(ClassificationReport, _Scaled):
    """`classification.json`: the scale, the proxy classifier's report on the test images, and with `--calibrate`
    the calibration after temperature scaling."""

    calibrated: CalibratedSummary | None = None


class ClassificationNote(Record):
    """The `classification` entry of `--json`: where the full report went, and its accuracy."""

    directory: str
    accuracy: float


class LeakNote(Record):
    """The `leaks` entry of `--json`: the warning about test images copying training ones, and if they were left out."""

    warning: str
    excluded: bool


class LearnedRerankNote(Record):
    """`evaluate --reranker`: the re-ranker applied, its blend, and test with it and with the embedding alone."""

    directory: str
    depth: int
    weight: float  # 0: validation chose the embedding alone, and the re-ranked row is that row
    base: str | None = None  # the dba spec the blend re-scores (`reranker.base`); None: the embedding's own search
    applied: bool
    reranked: dict[str, float | int]  # test Recall@K, MAP@R, ... with the re-ranker
    embedding_alone: dict[str, float | int]  # ... without it


class EvaluationRecord(Record):
    """What `retrieval evaluate --json` writes: the metrics at the top level, then each option's entry."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    metrics: dict[str, float | int] = Field(exclude=True)  # Recall@K, MAP@R, ...: free-form names, written first
    uncertainty: Uncertainty
    rerank: RerankRecord | None = None
    reranker: LearnedRerankNote | None = None
    calibration: Calibration | None = None
    classification: ClassificationNote | None = None
    verification: VerificationReport | None = None
    leaks: LeakNote | None = None

    @model_serializer(mode="wrap")
    def _metrics_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The metrics' keys at the top level, before the entries, as the file has always held them."""
        return {**self.metrics, **handler(self)}

    def json_text(self) -> str:
        """The file's text: indented JSON, the options that did not run left out."""
        return self.model_dump_json(indent=2, by_alias=True, exclude_unset=True) + "\n"
