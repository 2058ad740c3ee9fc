"""`retrieval serve` as a user runs it: a process that answers on its port, and one-line errors."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.index import SearchIndex


@pytest.mark.slow
def test_serve_process_answers_and_an_index_without_a_model_searches_by_vector(tmp_path, serve_process):
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    SearchIndex.build(vectors, kind="flat", progress=False).save(tmp_path / "index")
    with serve_process("--index", str(tmp_path / "index")) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/healthz").json() == {"status": "ok", "vectors": 50, "model": False}
            answer = client.post("/search", json={"vector": vectors[7].tolist(), "k": 3}).json()
            assert answer["results"][0]["id"] == 7 and answer["results"][0]["path"] is None
            upload = client.post("/search", files={"image": ("x.png", b"\x89PNG", "image/png")})
            assert upload.status_code == 400 and "records no model" in upload.json()["error"]
            assert "no image path" in client.get("/thumb/7").json()["error"]


def test_a_missing_index_is_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["serve", "--index", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "none" in err[0]


def test_contradicting_limits_are_one_line_with_exit_code_2(gallery, capsys):
    args = ["serve", "--index", str(gallery.index_dir), "--max-pixels", "40000000", "--decode-memory", "100M"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decode memory" in err[0] and "lower the pixel cap" in err[0]
