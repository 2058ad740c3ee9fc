"""`retrieval serve ARGS` in an interpreter where the training packages cannot be imported (the `[serve]` install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The `train` extra's packages, by import name: what `pip install "retrieval[serve]"` does not have.
TRAINING_PACKAGES = ("torch", "torchvision", "timm", "pytorch_metric_learning", "sklearn", "scipy", "matplotlib")

# `retrieval serve ARGS` for each set of ARGS with the training packages blocked; uvicorn.run hands the app
# to a TestClient instead of listening, which then searches with an image and with a vector.
_SERVE_WITHOUT_TORCH = """
import json, sys
blocked, image, servings = sys.argv[1].split(","), sys.argv[2], json.loads(sys.argv[3])
for name in blocked:
    sys.modules[name] = None
import uvicorn
from fastapi.testclient import TestClient
from retrieval.cli.main import main
apps = []
uvicorn.run = lambda app, **options: apps.append(app)
answers = []
for args in servings:
    assert main(["serve", *args, "--device", "cpu"]) == 0
    client = TestClient(apps[-1])
    with open(image, "rb") as handle:
        by_image = client.post("/search", files={"image": ("query.png", handle, "image/png")}, data={"k": "3"})
    dim = client.get("/info").json()["dimension"]
    by_vector = client.post("/search", json={"vector": [1.0] + [0.0] * (dim - 1), "k": 2})
    answers.append({"image": [by_image.status_code, by_image.json()]})
    answers[-1]["vector"] = [by_vector.status_code, by_vector.json()]
training = ("retrieval.train", "retrieval.data", "retrieval.models", "retrieval.checkpoint")
training += ("retrieval.inference.image_encoder",)
print(json.dumps({"answers": answers, "loaded": sorted(name for name in sys.modules if name.startswith(training))}))
"""


def serve_without_torch(image: Path, servings: list[list[str]]) -> dict[str, Any]:
    """What `_SERVE_WITHOUT_TORCH` printed for `servings` (lists of `serve` arguments) searched with `image`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [",".join(TRAINING_PACKAGES), str(image), json.dumps(servings)]
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_WITHOUT_TORCH, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
