"""A checkpoint with spread-out embeddings, its ONNX export, and the digits test images as PNG files
(made by `tests/export/digits.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.export.digits import digit_files, spread_digits_checkpoint


@pytest.fixture(scope="session")
def digits_images(tmp_path_factory) -> list[Path]:
    """The 899 digits test images."""
    return digit_files(tmp_path_factory.mktemp("digits"), "test")


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory, checkpoint_factory) -> Path:
    """`spread_digits_checkpoint`: the tiny untrained resnet10t, its statistics set on digits training images."""
    return spread_digits_checkpoint(tmp_path_factory.mktemp("digits_checkpoint"), checkpoint_factory)


@pytest.fixture(scope="session")
def exported(tmp_path_factory, digits_checkpoint) -> Path:
    """The ONNX export of `digits_checkpoint` (resnet10t, 16-d, 32 px RGB), made by `export_checkpoint` as
    `retrieval export --format onnx` makes it."""
    from retrieval.export.onnx_export import export_checkpoint

    out = tmp_path_factory.mktemp("export") / "digits"
    export_checkpoint(digits_checkpoint, out)
    return out
