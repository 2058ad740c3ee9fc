"""`EncoderChoice` and `open_encoder`: the one choice of `--checkpoint | --model | --backbone`, checked before torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice, open_encoder

ROOT = Path(__file__).resolve().parents[2]


def test_at_most_one_model_is_chosen() -> None:
    with pytest.raises(ValueError, match="at most one"):
        EncoderChoice(checkpoint=Path("a.pt"), model=Path("export"))
    assert not EncoderChoice().chosen and EncoderChoice(backbone="resnet10t").chosen
    with pytest.raises(ValueError, match="needs a chosen model"):
        open_encoder(EncoderChoice())


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (EncoderChoice(checkpoint=Path("missing.pt")), "checkpoint not found: missing.pt"),
        (EncoderChoice(model=Path("x"), weights=Path("w.pth")), "--weights, --config and --set describe a --backbone"),
        (EncoderChoice(checkpoint=Path("x.pt"), overrides=("data.image_size=64",)), "describe a --backbone"),
        (EncoderChoice(backbone="resnet10t", overrides=("model.backbon=x",)), "did you mean model.backbone?"),
    ],
)
def test_a_wrong_choice_is_one_line(choice: EncoderChoice, message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        choice.check()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_check_loads_no_model_library(tmp_path: Path) -> None:
    """What `index build` and `audit` run before PyTorch loads: a missing checkpoint is answered without torch."""
    script = (
        "import sys\nfrom pathlib import Path\nfrom retrieval.export.encoder_choice import EncoderChoice\n"
        "try:\n    EncoderChoice(checkpoint=Path('missing.pt')).check()\nexcept Exception as error:\n    print(error)\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'timm', 'onnxruntime')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "checkpoint not found: missing.pt; pass a run's checkpoints/best.pt or last.pt",
        "[]",
    ], done.stderr[-2000:]


def test_a_checkpoint_opens_as_its_image_encoder_read_once(tiny_checkpoint: Path) -> None:
    from retrieval.checkpoint import Checkpoint
    from retrieval.runtime.files import file_sha256

    loaded = Checkpoint.read(tiny_checkpoint)
    encoder = open_encoder(EncoderChoice(checkpoint=tiny_checkpoint, device="cpu"), loaded)
    info = encoder.info()
    assert info.checkpoint_sha256 == file_sha256(tiny_checkpoint) and encoder.dim == 16
    assert open_encoder(EncoderChoice(checkpoint=tiny_checkpoint, device="cpu")).info() == info


def test_an_export_opens_with_onnxruntime(exported: Path) -> None:
    from retrieval.export.onnx_encoder import OnnxEncoder

    encoder = open_encoder(EncoderChoice(model=exported, device="cpu"))
    assert isinstance(encoder, OnnxEncoder) and encoder.dim == 16


def test_a_backbone_opens_untrained_with_its_config(tmp_path: Path) -> None:

    choice = EncoderChoice(backbone="resnet10t", overrides=("data.image_size=48",), device="cpu")
    with pytest.warns(UserWarning, match="untrained, random network"):
        info = open_encoder(choice).info()
    assert info.image_size == 48 and info.backbone_config is not None
