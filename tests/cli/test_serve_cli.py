"""`retrieval serve` as a user runs it: a process that answers on its port, and one-line errors.

What the served app answers is tested on the app itself, in `tests/serve`."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.index import SearchIndex
from retrieval.serve.batching import BatchPolicy
from tests.serve.serving import serve_process


@pytest.mark.slow
def test_serve_process_answers_and_an_index_without_a_model_searches_by_vector(tmp_path):
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


def test_serve_takes_an_index_or_a_backend(gallery, capsys):
    with pytest.raises(SystemExit) as exit_status:
        main(["serve", "--index", str(gallery.index_dir), "--backend", "qdrant://db/gallery"])
    assert exit_status.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert main(["serve", "--backend", "qdrant+local:///nowhere?collection=g"]) == 2
    assert capsys.readouterr().err.strip() == "error: no local Qdrant database at /nowhere; export an index there first"


def test_serve_passes_the_batch_flags_and_refuses_a_zero_batch(gallery, monkeypatch, capsys):
    import uvicorn

    import retrieval.serve

    policies = []
    monkeypatch.setattr(retrieval.serve, "create_app", lambda *args, **options: policies.append(options["batching"]))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **options: None)
    assert main(["serve", "--index", str(gallery.index_dir), "--max-batch", "1", "--batch-wait-ms", "5"]) == 0
    assert policies == [BatchPolicy(max_batch=1, wait=0.005)]
    assert main(["serve", "--index", str(gallery.index_dir), "--max-batch", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-batch must be >= 1" in err[0]
