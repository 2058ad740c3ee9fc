"""An export directory: `model.onnx`, `preprocess.json` and `manifest.json`, read back and checked.

`retrieval export` writes each file atomically and the manifest last, recording the sha256 of the
other two; `read_export` checks both, so a directory whose export was interrupted, or whose files
were swapped, is refused instead of embedding with a model nobody measured. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from retrieval.core.preprocess import Preprocess
from retrieval.errors import UserError
from retrieval.export.manifest import ExportManifest
from retrieval.runtime.files import file_sha256

__all__ = ["MANIFEST_FILE", "MODEL_FILE", "PREPROCESS_FILE", "ExportFiles", "read_export"]

MODEL_FILE = "model.onnx"
PREPROCESS_FILE = "preprocess.json"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class ExportFiles:
    """A checked export directory."""

    directory: Path  # absolute
    manifest: ExportManifest  # manifest.json
    preprocess: Preprocess  # preprocess.json
    model_sha256: str  # of model.onnx: the model's identity in index manifests

    @property
    def model_path(self) -> Path:
        """The ONNX model file."""
        return self.directory / MODEL_FILE


def read_export(directory: str | Path) -> ExportFiles:
    """Read an export directory and check its files against its manifest.

    Raises:
        UserError: the directory, a file or a manifest field is missing, a field has the wrong type,
            the format is not the one this version reads, or a file's sha256 is not the one the
            manifest records.
    """
    directory = Path(directory).resolve()
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        what = "has no " + MANIFEST_FILE if directory.is_dir() else "does not exist"
        raise UserError(f"{directory} {what}; pass a directory written by `retrieval export` with --model DIR")
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
        raise UserError(f"cannot read {manifest_path} ({exc.__class__.__name__}); export the model again") from exc
    manifest = ExportManifest.read(data, manifest_path)
    hashes = {}
    for name in (MODEL_FILE, PREPROCESS_FILE):
        path = directory / name
        if not path.is_file():
            raise UserError(f"{path} is missing; export the model again")
        hashes[name] = file_sha256(path)
        if hashes[name] != manifest.files.get(name):
            raise UserError(
                f"{path} is not the file {MANIFEST_FILE} records (sha256 {hashes[name][:12]}...); the export was "
                "interrupted or changed: export the model again"
            )
    return ExportFiles(directory, manifest, Preprocess.read(directory / PREPROCESS_FILE), hashes[MODEL_FILE])
