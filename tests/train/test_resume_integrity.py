"""A resume verifies the whole of `last.pt`, not only its weights, and still resumes version-2 files (through the
library, `retrieval.train.runs`, as `retrieval train --resume` runs it)."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from retrieval.checkpoint import PAYLOAD_CHECKSUM
from retrieval.errors import UserError
from tests.train.training import train

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def trained_run(one_epoch_digits_run) -> Path:
    """A finished one-epoch run of the tiny demo (conftest's, shared); tests resume copies of it."""
    return one_epoch_digits_run[0]


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def _flip_a_byte_of(path: Path, tensor: torch.Tensor) -> None:
    """Flip one bit inside the bytes `torch.save` stored for `tensor` (its own zip entry), in place."""
    wanted = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    with zipfile.ZipFile(path) as archive:
        entry = next(info for info in archive.infolist() if archive.read(info) == wanted)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[entry.header_offset + 26 : entry.header_offset + 30])
    data[entry.header_offset + 30 + name_length + extra_length + 1] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_the_optimizer_state_stops_the_resume_with_one_line(trained_run, tmp_path):
    last = _copy(trained_run, tmp_path) / "checkpoints" / "last.pt"
    before = torch.load(last, weights_only=True)["optimizer"]["state"]
    target = next(key for key, state in before.items() if state["exp_avg"].numel() > 64)
    _flip_a_byte_of(last, before[target]["exp_avg"])
    after = torch.load(last, weights_only=True)["optimizer"]["state"]  # torch reads the damaged file without a word
    assert not torch.equal(after[target]["exp_avg"], before[target]["exp_avg"])

    with pytest.raises(UserError) as error:
        train(["train.epochs=2"], resume=tmp_path / "run")
    line = str(error.value)
    assert line.startswith(f"{last} is corrupt: its optimizer state") and "restore an intact copy" in line
    assert "\n" not in line


def test_a_version_2_run_without_the_payload_checksum_still_resumes(trained_run, tmp_path):
    checkpoints = _copy(trained_run, tmp_path) / "checkpoints"
    for name in ("last.pt", "best.pt"):  # as the toolkit wrote them before the field existed
        raw = torch.load(checkpoints / name, weights_only=True)
        del raw["manifest"][PAYLOAD_CHECKSUM]
        torch.save(raw, checkpoints / name)
    _, said = train(["train.epochs=2"], resume=tmp_path / "run")
    assert "MAP@R:" in said
    resumed = torch.load(checkpoints / "last.pt", weights_only=True)
    assert resumed["epoch"] == 1 and PAYLOAD_CHECKSUM in resumed["manifest"]


def test_a_last_pt_that_does_not_fit_the_runs_parts_is_one_line_not_a_traceback(trained_run, tmp_path):
    run = _copy(trained_run, tmp_path)
    # A model override cannot apply to the trained weights: refused by name before any state is loaded.
    with pytest.raises(UserError, match="^--set model.embedding_dim cannot apply to a trained checkpoint") as error:
        train(["model.embedding_dim=8", "train.epochs=2"], resume=run)
    assert "\n" not in str(error.value)
    # The version-2 fixture keeps an optimizer of one parameter group: no trainer's layout, so no exact resume.
    for name in ("last.pt", "best.pt"):
        shutil.copy(FIXTURES / "checkpoint_v2.pt", run / "checkpoints" / name)
    with pytest.raises(UserError) as error:
        train(["train.epochs=4"], resume=run)
    line = str(error.value)
    assert "the checkpoint's optimizer state does not fit this run's optimizer" in line and "parameter groups" in line
    assert "\n" not in line
