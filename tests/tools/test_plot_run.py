"""tools/plot_run.py draws every figure a run's records allow, from diagnostics of real `EpochDiagnostics`."""

from __future__ import annotations

import json

import numpy as np
import torch
from PIL import Image

from retrieval.train.diagnostics import EpochDiagnostics
from tests.tools.tool_modules import load_tool


def _records(epochs: int = 3) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    records = []
    for epoch in range(epochs):
        diagnostics = EpochDiagnostics(torch.tensor([0, 1, 2, 2]))
        for _ in range(4):
            labels = torch.randint(0, 4, (16,), generator=generator)
            logits = torch.randn(16, 4, generator=generator) * (2 + epoch)
            b = torch.randn(16, generator=generator) + epoch
            stats = {"logits": logits, "labels": labels, "c": 1 + 0.3 * torch.rand(16, generator=generator), "b": b}
            diagnostics.update({**stats, "w": (b < 1).float()})
        record = {
            "epoch": epoch + 1,
            "loss": 2.0 / (epoch + 1),
            "lr": 1e-3,
            **diagnostics.summary().model_dump(mode="json", exclude_none=True),
        }
        record.update({"val/recall@1": 0.5 + 0.1 * epoch, "val/map@r": 0.3, "val/head/recall@1": 0.6})
        records.append(record)
    return records


def test_plot_run_writes_every_figure(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    assert load_tool("plot_run").main([str(tmp_path)]) == 0
    names = {"curves.png", "difficulty.png", "gating.png", "gradients.png"}
    assert {line.split("/")[-1] for line in capsys.readouterr().out.split()} == names
    for name in names:
        with Image.open(tmp_path / "plots" / name) as image:
            pixels = np.asarray(image.convert("L"))
        assert pixels.std() > 10  # something was drawn


def test_plot_run_refuses_a_directory_without_metrics(tmp_path, capsys):
    assert load_tool("plot_run").main([str(tmp_path)]) == 2
    assert "metrics.jsonl not found" in capsys.readouterr().err
