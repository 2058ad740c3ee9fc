"""`retrieval export --quantize int8` refused in one line (exit code 2), writing nothing: a drop past the tolerance,
non-finite embeddings, options checked before exporting.

What the int8 bundle holds and how it embeds is tested through `export_checkpoint` (`tests/export/test_quantize.py`)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.cli.errors import one_line_error
from tests.export.digits import on_digits


@pytest.mark.slow
def test_a_drop_past_the_tolerance_is_refused_and_writes_nothing(capsys, digits_checkpoint, tmp_path):
    # No validation split: the test split is measured, and named in the refusal.
    checkpoint = on_digits(digits_checkpoint, tmp_path / "best.pt")
    out = tmp_path / "refused"
    args = ["export", "--checkpoint", str(checkpoint), "--out", str(out), "--quantize", "int8"]
    line = one_line_error(capsys, [*args, "--calibration-images", "8", "--tolerance", "-1"])
    assert "loses too much on the test split" in line and "tolerance -1" in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("broken", [np.nan, np.inf])
def test_an_int8_model_that_gives_non_finite_embeddings_is_refused(
    capsys, digits_checkpoint, tmp_path, monkeypatch, broken
):
    """40 of 100 images embedded as NaN (or inf) by the int8 model: scoring would drop them as unreadable and pass."""
    from retrieval.export import quantize

    embed = quantize.embed_dataset
    calls = []

    def embed_some_broken(*args, **kwargs):
        embeddings = embed(*args, **kwargs)
        calls.append(len(embeddings))
        if len(calls) == 2:  # the second model embedded is the int8 one
            embeddings[:40] = broken
        return embeddings

    monkeypatch.setattr(quantize, "embed_dataset", embed_some_broken)
    monkeypatch.setattr(quantize, "write_int8_model", lambda source, target, _: shutil.copyfile(source, target))
    checkpoint = on_digits(digits_checkpoint, tmp_path / "best.pt", val_fraction=0.1)  # ~90 validation images
    out = tmp_path / "int8"
    args = ["export", "--checkpoint", str(checkpoint), "--out", str(out), "--quantize", "int8"]
    line = one_line_error(capsys, [*args, "--calibration-images", "8", "--tolerance", "1"])
    assert f"the int8 model gives non-finite (NaN or inf) embeddings for 40 of {calls[0]} val images" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tolerance", "0.02"], "apply to --quantize int8 only"),
        (["--quantize", "int8", "--calibration-images", "0"], "--calibration-images must be >= 1"),
        (["--quantize", "int8", "--tolerance", "nan"], "--tolerance must be a number"),
        (["--quantize", "int8", "--set", "train.epochs=2"], "data.* keys only"),
    ],
)
def test_quantization_options_are_checked_before_exporting(capsys, tiny_checkpoint, tmp_path, extra, message):
    out = tmp_path / "out"
    assert message in one_line_error(
        capsys, ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out), *extra]
    )
    assert not out.exists()
