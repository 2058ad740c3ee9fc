"""Every command that README.md, CONTRIBUTING.md and docs/ show runs here on tiny data, or is listed with why not.

The commands are the `retrieval ...`, `python tools/...` and `torchrun ...` lines of the fenced bash blocks
(continuations joined, trailing `# comments` dropped); the set-up and check lines (`pip`, `ruff`, `pytest`,
`apt-get`, `tensorboard`) are not ours to test. `COMMANDS` maps each one, as written, to how it runs here or
why it cannot, and the first two tests fail when the docs and the table disagree in either direction, so a
new documented command must be added and a removed one cannot linger.

Each command runs in-process (`retrieval.cli.main.main`, a tool's `main`: a subprocess would pay the
imports each time) inside its own copy of a small world, a folder that holds every relative path the docs
name: `data/shop.csv`, `runs/shop/checkpoints/best.pt` (trained one epoch at 32 px), `runs/shop/index`,
`shoe.png`, `embeddings/`, ... So a command runs exactly as written, save absolute placeholder paths
(`/data/shop/dataset.csv`) and `...`-style elisions that its entry replaces, and the budget overrides
appended to the commands that train (timm's tiny `test_resnet` from scratch, one epoch, 32 px). The world is built once
per module; each test copies it because `index add`, `--save-threshold` and the like change what they touch
(its checkpoints, exports and weights hard-linked, `LINKED`: they are only ever replaced whole).
`retrieval serve` runs with uvicorn replaced by a test client that asks `/healthz`, which builds the same app.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from retrieval.cli.main import main
from tests.conftest import TINY_BACKBONE
from tests.data.official_layouts import write_cars, write_cub, write_inshop, write_sop
from tests.tools.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = ("retrieval ", "python tools/", "torchrun ")

# Appended to a command that trains: a tiny from-scratch run instead of an ImageNet ResNet-50 for hours, on the
# xdist worker's one thread.
TRAIN_BUDGET = (
    f"--set train.epochs=1 --set data.image_size=32 --set model.backbone={TINY_BACKBONE} --set model.pretrained=false "
    "--set data.batch_size=8 --set data.num_workers=0 --set train.warmup_epochs=0 "
    "--set train.freeze_backbone_epochs=0 --set train.freeze_bn=false --set train.threads=1 --set train.plots=false"
)
# Appended to `retrieval pretrain` besides TRAIN_BUDGET: one epoch, batches the small world fills.
PRETRAIN_BUDGET = "--set pretrain.epochs=1 --set pretrain.batch_size=8"
SERVED = r'"status": "ok", "vectors": \d+, "model": true\}\nsearch: 200, 10 results'
RECALL = r"(?m)^Recall@1: \d\.\d{4}\n(Recall@\d+: \d\.\d{4}\n)*MAP@R: \d\.\d{4}$"
# Where the shop CSV's rows live; the other CSVs of the world name the same images from their own folder.
SHOP = "data/shop"


@dataclass(frozen=True)
class Run:
    """How a documented command runs here.

    Attributes:
        expect: a regular expression its output (stdout and stderr) must match.
        replace: documented text -> the text run here (absolute placeholder paths, elisions).
        train: whether `TRAIN_BUDGET` is appended.
        fresh: world paths removed first, because the command writes them.
    """

    expect: str
    replace: dict[str, str] = field(default_factory=dict)
    train: bool = False
    fresh: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skip:
    """Why a documented command cannot run here, and what covers it instead."""

    reason: str


_DEMO = (
    "the digits demo trains for minutes; tests/cli/test_cli.py::test_the_digits_demos_beat_the_pixel_baseline runs it"
)
_REMOTE_QDRANT = "needs a remote Qdrant server; tests/vectordb runs export and search in Qdrant's embedded local mode"
_GPUS = "needs several GPUs or machines; tests/train/test_distributed.py runs torchrun training on 2 CPU processes"
_EMBED_PROCESSES = (
    "8 torchrun processes; tests/cli/test_embed_parts.py runs embed on 2 CPU processes, and the one-process "
    "form of the same layout (`retrieval embed ... --out emb/`) runs here"
)
_SWEEP = (
    "trains 12 runs (4 values x 3 seeds); tests/cli/test_experiment_cli.py runs a 2-run sweep, tests/sweep the grid "
    "and the report"
)

_EMOJI = (
    "renders Debian's emoji artwork (fonts-noto-color-emoji, ruby-gemojione, libjs-emojify, fonts-symbola), which CI "
    "does not install; tests/tools/test_make_emoji_dataset.py renders fake styles and checks the protocol"
)

_AUDIT_REPORT = (
    "reads a report the audit row above writes in its own copy of the world; tests/data/test_exclusion.py and "
    "tests/cli/test_index_exclude.py run data.exclude and index build --exclude on report-shaped CSVs"
)
_FASHION_AUDIT = (
    "reads Debian's dataset-fashion-mnist, which CI does not install, and trains; tests/audit runs the same "
    "pipeline on planted synthetic faults"
)

_EMOJI_BENCH = (
    "trains 9 runs (3 rows x 3 seeds) for an hour or more on the emoji artwork CI does not install; "
    "tests/tools/test_dev_benchmark.py checks its rows and runs the peer script on tiny data"
)
_PRETRAIN_GLYPHS = (
    "pretrains a ResNet-18 for 8 epochs on thousands of glyphs, an hour on a CPU; the documented `retrieval "
    "pretrain` command of training.md runs here, and tests/pretrain/test_pretrain_run.py pretrains on tiny CSVs"
)
_RERANKER = (
    "trains a pair model and exports it to ONNX, a minute on the docs' world at 2 cores; tests/reranker/test_build.py "
    "runs retrieval reranker on a tiny CSV, tests/evaluate/test_learned_rerank.py evaluate --reranker, "
    "tests/cli/test_index_query_reranker.py index build and index query --reranker, "
    "tests/serve/test_learned_rerank_api.py serve --reranker (without torch too)"
)
_GLYPH_RUN = (
    "trains on the glyph set tools/make_glyph_dataset.py renders from Debian fonts, for an hour or more on a CPU; "
    "the shop rows run train, reranker and evaluate --reranker on the docs' world"
)
COMMANDS: dict[str, Run | Skip] = {
    # README.md
    "retrieval train": Skip(_DEMO),
    (
        "retrieval train --config configs/csv_anchor.yaml --set data.path=/data/shop/dataset.csv --output-dir runs/shop"
    ): Run(RECALL, {"/data/shop/dataset.csv": f"{SHOP}/dataset.csv"}, train=True, fresh=("runs/shop",)),
    "retrieval evaluate --checkpoint runs/shop/checkpoints/best.pt --json runs/shop/test.json": Run(RECALL),
    (
        "retrieval index build --checkpoint runs/shop/checkpoints/best.pt --csv data/shop.csv --split test"
        " --out runs/shop/index"
    ): Run(r"(?m)^vectors: 45 of 45 images$", fresh=("runs/shop/index",)),
    "retrieval index query --index runs/shop/index --image shoe.png -k 5": Run(r"rank"),
    "retrieval index add --index runs/shop/index --images new_arrivals/": Run(r"^added 2 vectors \(ids 45\.\.46\)"),
    "retrieval index eval --index runs/shop/index": Run(r"recall@10"),
    "retrieval serve --index runs/shop/index": Run(SERVED),
    "retrieval export --checkpoint runs/shop/checkpoints/best.pt --format onnx --out runs/shop/onnx": Run(
        r"(?m)^parity onnxruntime vs PyTorch: ", fresh=("runs/shop/onnx",)
    ),
    "retrieval index build --model runs/shop/onnx --csv data/shop.csv --split test --out runs/shop/index-onnx": Run(
        r"(?m)^vectors: 45 of 45 images$", fresh=("runs/shop/index-onnx",)
    ),
    # CONTRIBUTING.md holds only the set-up and check commands.
    # docs/benchmarks.md and docs/experiments/glyphs.md
    (
        "python tools/make_glyph_dataset.py --out glyphs64 --size 64 --train-classes 284 --val-classes 80"
        ' --test-classes 80 --train-per-class 20 --query-family "DejaVu Serif" --gallery-per-class 6'
    ): Run(r"wrote glyphs64/dataset.csv"),
    (
        "python tools/dev_benchmark.py --csv glyphs64/dataset.csv --out bench64 --epochs 8 --threads 1"
        " --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_nca proxy_anchor circle triplet"
        " --toolkit anchor proxy_nca proxy_anchor triplet --variant circle=circle:loss.m=0.4,loss.gamma=80"
        " --pair toolkit-anchor peer-proxy_nca --pair toolkit-proxy_nca peer-proxy_nca"
        " --pair toolkit-proxy_anchor peer-proxy_anchor --pair circle peer-circle"
        " --pair toolkit-triplet peer-triplet"
    ): Skip(
        "trains 27 runs (9 rows x 3 seeds) for hours; tests/tools/test_dev_benchmark.py checks its rows and runs "
        "the peer script on tiny data"
    ),
    (
        "python tools/dev_benchmark.py --csv glyphs64/dataset.csv --out bench64_e4 --epochs 4 --threads 1"
        " --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_anchor --toolkit anchor proxy_anchor"
        " --variant a32=anchor:loss.gamma=32 --variant amax=anchor:loss.difficulty=max"
        " --variant a32m=anchor:loss.gamma=32,loss.margin=0.1 --variant nca32=proxy_nca:loss.scale=32"
        " --rerank anchor-dba=toolkit-anchor:dba --rerank anchor-kr=toolkit-anchor:kreciprocal"
        " --rerank anchor-qe=toolkit-anchor:qe --rerank peer-pa-dba=peer-proxy_anchor:dba"
        " --pair toolkit-anchor peer-proxy_anchor --pair a32 toolkit-anchor"
    ): Skip(
        "trains 21 runs (7 rows x 3 seeds) for hours; tests/tools/test_dev_benchmark.py checks its rows, the "
        "re-ranking rows on saved embeddings, and runs the peer script on tiny data"
    ),
    (
        "retrieval pretrain --csv glyphs64/dataset.csv --split train --config configs/csv_glyph.yaml"
        " --set data.image_size=32 --set train.threads=1 --set data.num_workers=1 --set pretrain.epochs=4"
        " --set pretrain.batch_size=128 --output-dir pre_simclr"
    ): Skip(
        "pretrains a ResNet-18 on 5,680 glyphs for hours on a CPU; the documented `retrieval pretrain` command of "
        "training.md runs here, and tests/pretrain/test_pretrain_run.py pretrains on tiny CSVs"
    ),
    (
        "python tools/dev_benchmark.py --csv glyphs64/dataset.csv --out bench_pre --image-size 32 --epochs 4"
        " --threads 1 --workers 1 --seeds 0 --peer proxy_anchor --toolkit anchor"
        " --variant b_simclr=anchor:model.weights=pre_simclr/backbone.safetensors"
        " --variant b_simsiam=anchor:model.weights=pre_simsiam/backbone.safetensors"
        " --pair b_simclr toolkit-anchor --pair b_simsiam toolkit-anchor --pair b_simclr b_simsiam"
        " --pair b_simclr peer-proxy_anchor --pair toolkit-anchor peer-proxy_anchor"
    ): Skip(
        "trains 4 runs for hours on the pretrained backbones above; tests/tools/test_dev_benchmark.py checks its "
        "rows and runs the peer script on tiny data"
    ),
    (
        "python tools/make_glyph_dataset.py --out glyphs32x40 --size 32 --train-classes 280 --val-classes 80"
        ' --test-classes 80 --train-per-class 40 --seed 1 --query-family "Liberation Sans" --gallery-per-class 6'
    ): Run(r"wrote glyphs32x40/dataset.csv"),
    (
        "python tools/dev_benchmark.py --csv glyphs32x40/dataset.csv --out bench32_e4 --image-size 32 --epochs 4"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_nca --toolkit proxy_nca"
        " --pair toolkit-proxy_nca peer-proxy_nca"
    ): Skip(
        "trains 6 runs (2 rows x 3 seeds) for hours; tests/tools/test_dev_benchmark.py checks its rows and runs "
        "the peer script on tiny data"
    ),
    "retrieval train --config configs/cub200_anchor.yaml --set data.root=/data/CUB_200_2011": Run(
        RECALL, {"/data/CUB_200_2011": "data/CUB_200_2011"}, train=True
    ),
    "retrieval train --config configs/cars196_anchor.yaml --set data.root=/data/cars196": Run(
        RECALL, {"/data/cars196": "data/cars196"}, train=True
    ),
    "retrieval train --config configs/sop_anchor.yaml --set data.root=/data/Stanford_Online_Products": Run(
        RECALL, {"/data/Stanford_Online_Products": "data/Stanford_Online_Products"}, train=True
    ),
    "retrieval train --config configs/inshop_anchor.yaml --set data.root=/data/inshop": Run(
        RECALL, {"/data/inshop": "data/inshop"}, train=True
    ),
    # docs/training.md
    "retrieval pretrain --csv /data/catalogue.csv --config configs/csv_artwork.yaml --output-dir runs/pretrain": Run(
        r"(?m)^backbone weights: runs/pretrain/backbone\.safetensors$",
        {"/data/catalogue.csv": "catalogue.csv", "runs/pretrain": f"runs/pretrain {PRETRAIN_BUDGET}"},
        train=True,
        fresh=("runs/pretrain",),
    ),
    (
        "retrieval train --config configs/csv_artwork.yaml --set data.path=/data/shop/dataset.csv"
        " --set model.weights=runs/pretrain/backbone.safetensors"
    ): Run(RECALL, {"/data/shop/dataset.csv": f"{SHOP}/dataset.csv"}, train=True),
    # docs/configuration.md
    "retrieval train --config configs/csv_anchor.yaml --set data.path=/data/shop/dataset.csv": Run(
        RECALL, {"/data/shop/dataset.csv": f"{SHOP}/dataset.csv"}, train=True
    ),
    # docs/datasets.md
    "python tools/make_fashion_mnist.py --out data/fashion_mnist": Skip(
        "needs the dataset-fashion-mnist Debian package; tests/tools/test_make_fashion_mnist.py converts IDX files"
    ),
    "python tools/make_glyph_dataset.py --out data/glyphs": Run(r"wrote data/glyphs/dataset.csv"),
    (
        "retrieval data longtail --csv data/fashion_mnist/dataset.csv --out data/fashion_mnist/lt100.csv"
        " --imbalance 100 --seed 0"
    ): Run(r"^wrote data/fashion_mnist/lt100\.csv: "),
    # docs/distributed.md
    "torchrun --nproc_per_node 4 -m retrieval train --config configs/cub200_anchor.yaml": Skip(_GPUS),
    (
        "torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 --rdzv_backend c10d --rdzv_id cub-run"
        " --rdzv_endpoint node0.example.org:29500 -m retrieval train --config configs/cub200_anchor.yaml"
        " --output-dir /shared/runs/cub"
    ): Skip(_GPUS),
    (
        "torchrun --nproc_per_node 8 -m retrieval embed --checkpoint run/checkpoints/best.pt"
        " --csv catalogue.csv --out /shared/emb/ --part-rows 100000 --batch-size 256 --num-workers 8"
    ): Skip(_EMBED_PROCESSES),
    "retrieval embed --checkpoint run/checkpoints/best.pt --csv catalogue.csv --out emb/": Run(
        r"^embeddings: emb/ \(77 x 128 in 1 part"
    ),
    # docs/export.md
    (
        "retrieval export --checkpoint runs/shop/checkpoints/best.pt --format onnx --quantize int8 --out "
        "runs/shop/onnx-int8 [--calibration-images 256] [--tolerance 0.01] [--set data.root=/data/moved/shop]"
    ): Run(
        r"(?m)^int8: recall@1 ",
        {"[--calibration-images 256] [--tolerance 0.01] [--set data.root=/data/moved/shop]": "--tolerance 1"},
        fresh=("runs/shop/onnx-int8",),
    ),
    "retrieval index query --index runs/shop/index-onnx --image shoe.png": Run(r"rank"),
    "retrieval serve --index runs/shop/index-onnx": Run(SERVED),
    # docs/scale.md
    "torchrun --nproc_per_node 8 -m retrieval embed --checkpoint best.pt --csv catalogue.csv --out embeddings/": Skip(
        _EMBED_PROCESSES
    ),
    "retrieval index build --embeddings embeddings/ --out catalogue-index --max-memory 4G --target-recall 0.95": Run(
        r"(?m)^vectors: 77 from 1 embedding input", fresh=("catalogue-index",)
    ),
    "retrieval serve --index catalogue-index --checkpoint best.pt": Run(SERVED),
    "retrieval index build --embeddings embeddings/ --out catalogue-index --on-disk --target-recall 0.95": Run(
        r"(?m)^vectors: 77 from 1 embedding input", fresh=("catalogue-index",)
    ),
    "retrieval index train --embeddings embeddings/ --out trained": Run(r"^trained: trained ", fresh=("trained",)),
    "retrieval index build --embeddings embeddings/ --trained trained --shard K/M --out shard-K": Run(
        r"^index: shard-0 ", {"K/M": "0/2", "shard-K": "shard-0"}, fresh=("shard-0",)
    ),
    "retrieval index merge shard-0 shard-1 ... --out catalogue-index": Run(
        r"(?m)^vectors: 77 from 2 shards", {" ... ": " "}, fresh=("catalogue-index",)
    ),
    # docs/reranker.md
    "retrieval reranker --checkpoint runs/shop/checkpoints/best.pt --output-dir runs/shop/reranker": Skip(_RERANKER),
    "retrieval evaluate --checkpoint runs/shop/checkpoints/best.pt --reranker runs/shop/reranker": Skip(_RERANKER),
    "retrieval index build --checkpoint runs/shop/checkpoints/best.pt --csv data/shop.csv --reranker runs/shop/reranker"
    " --out runs/shop/index-rr": Skip(_RERANKER),
    "retrieval index query --index runs/shop/index-rr --image shoe.png -k 5 --reranker runs/shop/reranker": Skip(
        _RERANKER
    ),
    "retrieval serve --index runs/shop/index-rr --reranker runs/shop/reranker": Skip(_RERANKER),
    # docs/search.md (also shows the README's index build, query, add, eval and serve lines)
    "retrieval index remove --index runs/shop/index --ids 17 42": Run(r"^removed 2 vectors; the index holds 43"),
    "retrieval index compact --index runs/shop/index": Run(r"^compacted runs/shop/index: "),
    "retrieval evaluate --checkpoint runs/shop/checkpoints/best.pt --verification --save-threshold 1e-3": Run(r"AUC"),
    "retrieval evaluate --checkpoint runs/shop/checkpoints/best.pt --rerank qe": Run(r"qe:k="),
    "retrieval index query --index runs/shop/index --image shoe.png --rerank qe:k=10,alpha=0": Run(r"rank"),
    'retrieval index query --index runs/shop/index --image shoe.png --where "label in (3, 5) and price < 50"': Run(
        r"rank"
    ),
    (
        "retrieval index query --index runs/shop/index --image shoe.png"
        " --where \"(shop = 'a' or shop = 'b') and not sku is null\""
    ): Run(r"rank"),
    "retrieval index query --index runs/shop/index --image shoe.png --where filter.json": Run(r"rank"),
    "retrieval index query --index runs/shop/index --image shoe.png --min-score stored": Run(r"rank +score +id"),
    "retrieval index query --index runs/shop/index --images queries/ --min-score stored": Run(
        r"query: queries/test_5_0\.png\nrank"
    ),
    (
        "retrieval serve --index runs/shop/index [--host 127.0.0.1] [--port 8000] [--device auto]"
        " [--search-threads 1] [--checkpoint CKPT] [--image-root DIR] [--openapi] [--reload-interval 1]"
        " [--max-upload-mb 16] [--max-pixels 40000000] [--decode-memory 1G] [--decode-wait 1] [--body-timeout 30]"
        " [--max-batch 16] [--batch-wait-ms 2]"
    ): Run(SERVED, {"[": "", "]": "", "CKPT": "runs/shop/checkpoints/best.pt", "DIR": SHOP}),
    (
        "retrieval index export --index runs/shop/index"
        " --to qdrant://db.internal:6333/shop [--batch-size 256] [--recreate]"
    ): Skip(_REMOTE_QDRANT),
    "retrieval serve --backend qdrant://db.internal:6333/shop [--checkpoint CKPT]": Skip(_REMOTE_QDRANT),
    # docs/experiments/sweep_anchor_gamma_glyphs.md
    (
        "retrieval sweep --config configs/csv_glyph.yaml --set data.path=glyphs32/dataset.csv"
        " --set data.image_size=32 --set train.epochs=8 --set train.threads=1 --set data.num_workers=1"
        " --set train.device=cpu --set train.select_on=map@r --grid loss.gamma=4,8,16,32 --seeds 0,1,2"
        " --output-dir runs/glyph-gamma"
    ): Skip(_SWEEP),
    # docs/training.md
    "retrieval train --config ... --set 'train.loggers=[tensorboard, mlflow]'": Run(
        RECALL, {"...": f"configs/csv_anchor.yaml --set data.path={SHOP}/dataset.csv"}, train=True
    ),
    "retrieval embed --checkpoint run/checkpoints/best.pt --csv data.csv --split test --out emb.parquet": Run(
        r"^embeddings: emb\.parquet \(45 x 128\)"
    ),
    (
        "retrieval sweep --config configs/csv_glyph.yaml --set data.path=glyphs32/dataset.csv"
        " --grid loss.gamma=4,8,16,32 --seeds 0,1,2 [--jobs 2] --output-dir runs/glyph-gamma"
    ): Skip(_SWEEP),
    "retrieval compare runs/glyph-gamma/<cell A>/seed-0 runs/glyph-gamma/<cell B>/seed-0": Run(
        r"(?m)^A - B, paired on the same 45 queries", {"<cell A>": "a", "<cell B>": "b"}
    ),
    # docs/experiments/emoji.md: the baselines run on the shop CSV's colour images.
    "python tools/make_emoji_dataset.py --out emoji64": Skip(_EMOJI),
    (
        "python tools/dev_benchmark.py --csv emoji64/dataset.csv --out emoji_e12 --config configs/csv_artwork.yaml"
        " --epochs 12 --threads 1 --workers 1 --jobs 3 --seeds 0 1 2 --peer proxy_anchor --toolkit anchor proxy_anchor"
        " --rerank art-dba=toolkit-anchor:dba --rerank peer-dba=peer-proxy_anchor:dba"
        " --pair toolkit-anchor peer-proxy_anchor --pair toolkit-proxy_anchor toolkit-anchor"
        " --pair art-dba peer-proxy_anchor"
    ): Skip(_EMOJI_BENCH),
    (
        "python tools/dev_benchmark.py --csv emoji64/dataset.csv --out emoji --config configs/csv_artwork.yaml"
        " --image-size 32 --epochs 12 --threads 1 --workers 1 --seeds 0 1 2 --peer proxy_anchor --toolkit anchor"
        " --toolkit-set augment.preset=artwork --variant a_glyph=anchor:augment.preset=glyph"
        " --pair a_glyph toolkit-anchor --pair a_glyph peer-proxy_anchor"
    ): Skip(_EMOJI_BENCH),
    (
        "python tools/digits_pixel_baseline.py --csv emoji64/dataset.csv --split test --size 64"
        " --per-query pixels_test.npz"
    ): Run(r"Recall@1", {"emoji64/dataset.csv": f"{SHOP}/dataset.csv"}),
    (
        "retrieval evaluate --backbone resnet18 --config configs/csv_glyph.yaml --set data.path=emoji64/dataset.csv"
        " --set model.in_chans=3 --per-query untrained_test.npz"
    ): Run(RECALL, {"emoji64/dataset.csv": f"{SHOP}/dataset.csv"}),
    # docs/audit.md
    "retrieval audit --checkpoint runs/shop/checkpoints/best.pt --csv data/shop.csv --out runs/shop/audit": Run(
        r"(?m)^report: runs/shop/audit/index\.html$"
    ),
    "retrieval audit --model runs/shop/onnx --csv data/shop.csv --out runs/shop/audit-onnx": Run(
        r"(?m)^report: runs/shop/audit-onnx/index\.html$"
    ),
    "retrieval audit --index runs/shop/index --out runs/shop/audit-index": Run(
        r"(?m)^report: runs/shop/audit-index/index\.html$"
    ),
    (
        "retrieval train --config configs/csv_anchor.yaml --set data.path=/data/shop/dataset.csv"
        " --set data.exclude=runs/shop/audit/label_issues.csv --output-dir runs/shop-clean"
    ): Skip(_AUDIT_REPORT),
    (
        "retrieval index build --checkpoint runs/shop/checkpoints/best.pt --csv data/shop.csv"
        " --exclude runs/shop/audit/near_duplicates.csv --out runs/shop/index-dedup"
    ): Skip(_AUDIT_REPORT),
    "retrieval evaluate --checkpoint runs/shop/checkpoints/best.pt --exclude-leaks": Run(RECALL),
    "python tools/bench_audit.py plant --out /data/audit_fmnist --train 6000 --val 1000 --test 2000": Skip(
        _FASHION_AUDIT
    ),
    (
        "python tools/bench_audit.py score --csv /data/audit_fmnist/dataset.csv"
        " --checkpoint runs/audit/checkpoints/best.pt --part validation"
    ): Skip(_FASHION_AUDIT),
    (
        "python tools/bench_audit.py score --csv /data/audit_fmnist/dataset.csv"
        " --checkpoint runs/audit/checkpoints/best.pt --part scored"
    ): Skip(_FASHION_AUDIT),
    "python tools/bench_audit.py scale --sizes 10000,30000,100000,300000": Skip(
        "audits up to 300k synthetic embeddings for many minutes; tests/tools/test_bench_audit.py runs the scale "
        "audit at 2,000 rows and tests/audit/test_knn_graph.py the IVF graph small"
    ),
    "python tools/property_tests.py": Skip(
        "every property at 20,000 examples takes hours on 2 cores; `pytest` runs the same properties at the ci "
        "profile, and tests/tools/test_property_tests.py runs this script at the dev profile"
    ),
    "python tools/bench_audit.py scale --sizes 1000000": Skip(
        "audits a million synthetic embeddings: 12 minutes and 6 GiB; the 300k row above is skipped likewise"
    ),
    "python tools/bench_audit.py plant --csv emoji64/dataset.csv --out emoji_planted": Skip(
        "reads the emoji set rendered from Debian artwork CI does not install; tests/tools/test_bench_audit.py "
        "plants the same faults in a generated colour CSV"
    ),
    (
        "retrieval train --config configs/csv_artwork.yaml --set data.path=emoji_planted/dataset.csv"
        " --set data.image_size=32 --set train.threads=1 --set data.num_workers=1 --output-dir runs/audit_emoji"
    ): Skip("trains for many minutes on the planted emoji set the row above writes"),
    (
        "python tools/bench_audit.py score --csv emoji_planted/dataset.csv"
        " --checkpoint runs/audit_emoji/checkpoints/best.pt --part scored --label-rows train"
    ): Skip("scores the run above; tests/audit runs the same pipeline on planted synthetic faults"),
    (
        "retrieval train --config configs/csv_glyph.yaml --set data.path=glyphs64/dataset.csv --set data.num_workers=1"
        " --set train.threads=1 --set train.seed=SEED --output-dir g64/seed-SEED"
    ): Skip(_GLYPH_RUN),
    (
        "retrieval evaluate --checkpoint g64/seed-SEED/checkpoints/best.pt --set train.threads=1 --per-query plain.npz"
    ): Skip(_GLYPH_RUN),
    (
        "retrieval evaluate --checkpoint g64/seed-SEED/checkpoints/best.pt --set train.threads=1 --rerank dba"
        " --per-query dba.npz"
    ): Skip(_GLYPH_RUN),
    (
        "retrieval reranker --checkpoint g64/seed-SEED/checkpoints/best.pt --set train.threads=1"
        " --output-dir g64/seed-SEED/rr"
    ): Skip(_GLYPH_RUN),
    (
        "retrieval evaluate --checkpoint g64/seed-SEED/checkpoints/best.pt --set train.threads=1"
        " --reranker g64/seed-SEED/rr --per-query rr.npz"
    ): Skip(_GLYPH_RUN),
    "retrieval compare rr.npz plain.npz": Skip(_GLYPH_RUN),
    "python tools/bench_audit.py plant --csv emoji64/dataset.csv --out planted --recoloured 0.02": Skip(
        "reads the emoji set rendered from Debian artwork CI does not install; tests/tools/test_bench_audit.py "
        "plants recoloured non-copies in a generated colour CSV"
    ),
    (
        "retrieval train --config configs/csv_artwork.yaml --set data.path=planted/dataset.csv --set data.image_size=32"
        " --set train.epochs=1 --set train.threads=1 --set data.num_workers=0 --output-dir weak"
    ): Skip("trains on the planted emoji set the row above writes"),
    "retrieval audit --checkpoint weak/checkpoints/best.pt --csv planted/dataset.csv --out after-weak": Skip(
        "audits the run above; the shop rows run the same command"
    ),
    (
        "python tools/score_audit_report.py --truth planted/truth.json before-weak after-weak before-well after-well"
        " --label-rows train"
    ): Skip(
        "scores the reports above, two of them by an earlier version; tests/tools/test_score_audit_report.py scores "
        "report folders it writes"
    ),
    (
        "python tools/dev_benchmark.py --csv glyphs32x40/dataset.csv --out short --image-size 32 --epochs 4"
        " --threads 1 --workers 1 --seeds 0 --peer proxy_nca proxy_anchor circle triplet arcface cosface"
        " --toolkit anchor proxy_nca proxy_anchor triplet arcface cosface"
        " --variant circle=circle:loss.m=0.4,loss.gamma=80 --pair toolkit-anchor peer-proxy_nca"
        " --pair toolkit-anchor peer-proxy_anchor --pair toolkit-proxy_nca peer-proxy_nca"
        " --pair toolkit-proxy_anchor peer-proxy_anchor --pair circle peer-circle --pair toolkit-triplet peer-triplet"
        " --pair toolkit-arcface peer-arcface --pair toolkit-cosface peer-cosface"
    ): Skip(
        "trains 13 runs for hours; tests/tools/test_dev_benchmark.py checks its rows and runs the peer script on "
        "tiny data"
    ),
    (
        "python tools/dev_benchmark.py --csv glyphs32x40/dataset.csv --out short --image-size 32 --epochs 4"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer arcface --toolkit arcface"
        " --variant af64=arcface:loss.scale=64 --variant af_p1=arcface:train.proxy_lr_mult=1"
        " --pair toolkit-arcface peer-arcface --pair af64 toolkit-arcface --pair af_p1 toolkit-arcface"
        " --pair af_p1 peer-arcface"
    ): Skip(
        "trains 12 runs for an hour; tests/tools/test_dev_benchmark.py checks its rows and runs the peer script on "
        "tiny data"
    ),
    (
        "python tools/make_glyph_dataset.py --out glyphs48x40 --size 48 --train-classes 280 --val-classes 80"
        ' --test-classes 80 --train-per-class 40 --seed 1 --query-family "Liberation Sans" --gallery-per-class 6'
    ): Skip("the glyphs32x40 command above at another size, which runs here"),
    (
        "python tools/dev_benchmark.py --csv glyphs48x40/dataset.csv --out short48 --image-size 48 --epochs 4"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_anchor proxy_nca --toolkit anchor proxy_nca"
        " --pair toolkit-anchor peer-proxy_anchor --pair toolkit-anchor peer-proxy_nca"
        " --pair toolkit-proxy_nca peer-proxy_nca"
    ): Skip(
        "trains 12 runs for an hour; tests/tools/test_dev_benchmark.py checks its rows and runs the peer script on "
        "tiny data"
    ),
    (
        "python tools/dev_benchmark.py --csv glyphs48x40/dataset.csv --out short48 --image-size 48 --epochs 4"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_anchor circle triplet arcface cosface"
        " --toolkit proxy_anchor triplet arcface cosface --variant circle=circle:loss.m=0.4,loss.gamma=80"
        " --variant af_p1=arcface:train.proxy_lr_mult=1 --pair toolkit-proxy_anchor peer-proxy_anchor"
        " --pair circle peer-circle --pair toolkit-triplet peer-triplet --pair toolkit-arcface peer-arcface"
        " --pair af_p1 peer-arcface --pair toolkit-cosface peer-cosface"
    ): Skip(
        "trains 33 runs (11 rows x 3 seeds) for hours; tests/tools/test_dev_benchmark.py checks its rows and runs the "
        "peer script on tiny data"
    ),
    (
        "retrieval pretrain --csv emoji_c.csv --config configs/csv_artwork.yaml --set augment.preset=artwork"
        " --set data.image_size=32 --set train.threads=2 --set data.num_workers=1 --set pretrain.epochs=30"
        " --set pretrain.batch_size=128 --output-dir pre_emoji_mono30"
    ): Skip(
        "pretrains a ResNet-18 for 30 epochs on 6,780 emoji, an hour on a CPU; the documented `retrieval pretrain` "
        "command of training.md runs here with csv_artwork.yaml's one_ink, and tests/pretrain/test_views.py checks "
        "the redrawn views"
    ),
    (
        "python tools/dev_benchmark.py --csv emoji64/dataset.csv --out emoji --config configs/csv_artwork.yaml"
        " --image-size 32 --epochs 12 --threads 1 --workers 1 --jobs 3 --seeds 0 1 2 --peer proxy_anchor"
        " --toolkit anchor --variant c30=anchor:model.weights=pre_emoji_c30/backbone.safetensors"
        " --variant cmono=anchor:model.weights=pre_emoji_mono30/backbone.safetensors"
        " --pair cmono toolkit-anchor --pair cmono c30 --pair cmono peer-proxy_anchor"
    ): Skip(_EMOJI_BENCH),
    (
        "python tools/dev_benchmark.py --csv glyphs32x40/dataset.csv --out short_p1 --image-size 32 --epochs 4"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --toolkit anchor cosface"
        " --variant anc_p1=anchor:train.proxy_lr_mult=1 --variant cf_p1=cosface:train.proxy_lr_mult=1"
        " --pair anc_p1 toolkit-anchor --pair cf_p1 toolkit-cosface"
    ): Skip("trains 12 runs for half an hour; tests/tools/test_dev_benchmark.py checks its rows and variants"),
    (
        "python tools/dev_benchmark.py --csv glyphs32x40/dataset.csv --out e8 --image-size 32 --epochs 8"
        " --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer arcface --toolkit arcface"
        " --variant af_p1=arcface:train.proxy_lr_mult=1"
        " --pair af_p1 toolkit-arcface --pair af_p1 peer-arcface --pair toolkit-arcface peer-arcface"
    ): Skip(
        "trains 9 runs for half an hour; tests/tools/test_dev_benchmark.py checks its rows and runs the peer script on "
        "tiny data"
    ),
    (
        "retrieval train --config configs/digits_arcface.yaml --set train.threads=1 --set train.seed=0"
        " --output-dir arcface-p1-s0"
    ): Run(RECALL, train=True),
    (
        "retrieval train --config configs/digits_arcface.yaml --set train.threads=1 --set train.seed=0"
        " --set train.proxy_lr_mult=100 --output-dir arcface-p100-s0"
    ): Skip("the command above with another proxy rate, which it runs"),
    "retrieval compare arcface-p1-s0 arcface-p100-s0": Skip(
        "pairs the two runs above; the glyph-gamma `retrieval compare` row runs compare"
    ),
    (
        "retrieval pretrain --csv emoji_c.csv --config configs/csv_artwork.yaml --set augment.preset=artwork"
        " --set data.image_size=32 --set train.threads=1 --set data.num_workers=1 --set pretrain.epochs=30"
        " --set pretrain.batch_size=128 --output-dir pre_emoji_c30"
    ): Skip(
        "pretrains a ResNet-18 for 30 epochs on 6,780 emoji, over an hour on a CPU, from artwork CI does not "
        "install; tests/pretrain/test_pretrain_run.py pretrains on tiny CSVs"
    ),
    (
        "python tools/dev_benchmark.py --csv emoji64/dataset.csv --out emoji --config configs/csv_artwork.yaml"
        " --image-size 32 --epochs 12 --threads 1 --workers 1 --seeds 0 1 2 --peer proxy_anchor --toolkit anchor"
        " --variant c30=anchor:model.weights=pre_emoji_c30/backbone.safetensors --pair c30 toolkit-anchor"
        " --pair c30 peer-proxy_anchor --pair toolkit-anchor peer-proxy_anchor"
    ): Skip(_EMOJI_BENCH),
    (
        "python tools/dev_benchmark.py --csv emoji64/dataset.csv --out emoji --config configs/csv_artwork.yaml"
        " --image-size 32 --epochs 12 --threads 1 --workers 1 --jobs 2 --seeds 0 1 2 --peer proxy_anchor"
        " --toolkit anchor --variant c30=anchor:model.weights=pre_emoji_c30/backbone.safetensors"
        " --variant c30f=anchor:model.weights=pre_emoji_c30/backbone.safetensors,train.freeze_backbone_epochs=1"
        " --variant c30l=anchor:model.weights=pre_emoji_c30/backbone.safetensors,train.lr=0.0003,"
        "train.proxy_lr_mult=33.3 --pair c30f toolkit-anchor --pair c30l toolkit-anchor --pair c30f c30"
        " --pair c30f peer-proxy_anchor"
    ): Skip(_EMOJI_BENCH),
    (
        "python tools/make_glyph_dataset.py --out glyphs64x --size 64 --train-classes 306 --val-classes 80"
        ' --test-classes 80 --train-per-class 20 --query-family "DejaVu Serif" --gallery-per-class 6'
    ): Skip("renders 7,400 glyphs for a minute; the glyphs64 row above runs the same maker"),
    (
        "python tools/pretrain_pool.py --dataset glyphs64/dataset.csv --extra glyphs64x/dataset.csv --out glyph_c.csv"
    ): Skip("reads the glyphs64x set the row above renders; tests/tools/test_pretrain_pool.py runs the tool"),
    (
        "retrieval pretrain --csv glyphs64/dataset.csv --split train --config configs/csv_glyph.yaml"
        " --set data.image_size=32 --set train.threads=1 --set data.num_workers=1 --set pretrain.epochs=8"
        " --set pretrain.batch_size=128 --output-dir pre_glyph_b"
    ): Skip(_PRETRAIN_GLYPHS),
    (
        "retrieval pretrain --csv glyph_c.csv --config configs/csv_glyph.yaml"
        " --set data.image_size=32 --set train.threads=1 --set data.num_workers=1 --set pretrain.epochs=8"
        " --set pretrain.batch_size=128 --output-dir pre_glyph_c"
    ): Skip(_PRETRAIN_GLYPHS),
    (
        "python tools/dev_benchmark.py --csv glyphs64/dataset.csv --out glyph --image-size 32 --epochs 4 --threads 1"
        " --workers 1 --seeds 0 1 2 --peer proxy_anchor --toolkit anchor --config configs/csv_glyph.yaml"
        " --variant b=anchor:model.weights=pre_glyph_b/backbone.safetensors"
        " --variant c=anchor:model.weights=pre_glyph_c/backbone.safetensors"
        " --variant a_eq=anchor:train.epochs=23,train.eval_every=23"
        " --pair c toolkit-anchor --pair b toolkit-anchor --pair c b --pair c peer-proxy_anchor"
        " --pair toolkit-anchor peer-proxy_anchor"
    ): Skip(
        "trains 15 runs for hours on the pretrained backbones above; tests/tools/test_dev_benchmark.py checks its "
        "rows and runs the peer script on tiny data"
    ),
    "retrieval compare untrained_test.npz pixels_test.npz": Skip(
        "pairs the files the two commands above write; the glyph-gamma `retrieval compare` row above runs compare"
    ),
}


def documented_commands() -> dict[str, list[str]]:
    """Each command of the docs' fenced bash blocks -> the files that show it, continuations joined."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for block in re.findall(r"^```bash\n(.*?)^```", doc.read_text(), re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                command = " ".join(_drop_comment(line).split())
                if command.startswith(PROGRAMS):
                    found.setdefault(command, []).append(doc.relative_to(ROOT).as_posix())
    return found


def _drop_comment(line: str) -> str:
    """The line up to a `#` that starts a word outside quotes (a shell comment)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def test_every_documented_command_is_in_the_table() -> None:
    missing = sorted(set(documented_commands()) - set(COMMANDS))
    assert not missing, "documented commands with neither a way to run nor a reason in COMMANDS:\n" + "\n".join(missing)


def test_every_command_in_the_table_is_documented() -> None:
    stale = sorted(set(COMMANDS) - set(documented_commands()))
    assert not stale, "COMMANDS entries the docs no longer show (remove or update them):\n" + "\n".join(stale)


def _write_image(path: Path, colour: np.ndarray, rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(colour + rng.normal(0, 20, size=(32, 32, 3)), 0, 255).astype(np.uint8)).save(path)


def _write_csv(path: Path, rows: list[dict[str, object]], prefix: str) -> None:
    """The shop rows as a CSV in another folder: image paths stay relative to the CSV's own folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(rows[0])] + [
        ",".join(str(prefix + str(v)) if k == "path" else str(v) for k, v in r.items()) for r in rows
    ]
    path.write_text("\n".join(lines) + "\n")


def _build_world(root: Path) -> None:
    """Every file and folder the documented commands name, made by the commands the docs show before them."""
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    # Integer labels, a numeric price and a string shop: the columns the filter examples use. The test split
    # has more than 42 rows, so `index remove --ids 17 42` finds both ids.
    for split, classes, count in (("train", (0, 1, 2, 6), 6), ("val", (7, 8), 4), ("test", (3, 4, 5), 15)):
        for label in classes:
            colour = rng.integers(0, 256, size=3)
            for i in range(count):
                name = f"images/{split}_{label}_{i}.png"
                _write_image(root / SHOP / name, colour, rng)
                rows.append(
                    {
                        "path": name,
                        "label": label,
                        "split": split,
                        "price": 10 + 7 * i,
                        "shop": "ab"[i % 2],
                        "sku": "" if i % 3 == 0 else f"sku-{i}",
                    }
                )
    _write_csv(root / SHOP / "dataset.csv", rows, "")
    _write_csv(root / "data/shop.csv", rows, "shop/")
    _write_csv(root / "data.csv", rows, f"{SHOP}/")
    _write_csv(root / "catalogue.csv", rows, f"{SHOP}/")
    # Fashion-MNIST's shape for `data longtail --imbalance 100`: 100 training images a class (the shop's, again).
    fashion = [row | {"label": n % 4} for n, row in enumerate(r for r in rows * 20 if r["split"] == "train")]
    _write_csv(root / "data/fashion_mnist/dataset.csv", fashion + [r for r in rows if r["split"] == "test"], "../shop/")
    shutil.copy(root / SHOP / "images/test_3_0.png", root / "shoe.png")
    for folder, split in (("new_arrivals", "val"), ("queries", "test")):
        for source in sorted((root / SHOP / "images").glob(f"{split}_*_0.png")):
            (root / folder).mkdir(exist_ok=True)
            shutil.copy(source, root / folder / source.name)
    (root / "filter.json").write_text(json.dumps({"label": {"in": [3, 5]}, "price": {"lt": 50}, "shop": "a"}))
    (root / "configs").symlink_to(ROOT / "configs")
    write_cub(root / "data/CUB_200_2011")
    write_cars(root / "data/cars196")
    write_sop(root / "data/Stanford_Online_Products")
    write_inshop(root / "data/inshop")

    best = "runs/shop/checkpoints/best.pt"
    steps = [
        f"train --config configs/csv_anchor.yaml --set data.path={SHOP}/dataset.csv --output-dir runs/shop "
        + TRAIN_BUDGET,
        f"evaluate --checkpoint {best} --verification --save-threshold 1e-3",
        f"index build --checkpoint {best} --csv data/shop.csv --split test --out runs/shop/index",
        f"export --checkpoint {best} --format onnx --out runs/shop/onnx",
        "index build --model runs/shop/onnx --csv data/shop.csv --split test --out runs/shop/index-onnx",
        f"embed --checkpoint {best} --csv catalogue.csv --out embeddings/ --part-rows 40",  # two parts: two shards
        "index build --embeddings embeddings/ --out catalogue-index",
        "pretrain --csv catalogue.csv --config configs/csv_artwork.yaml --output-dir runs/pretrain "
        + f"{TRAIN_BUDGET} {PRETRAIN_BUDGET}",
        "index train --embeddings embeddings/ --out trained",
        "index build --embeddings embeddings/ --trained trained --shard 0/2 --out shard-0",
        "index build --embeddings embeddings/ --trained trained --shard 1/2 --out shard-1",
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for step in steps:
            assert main(shlex.split(step)) == 0, step
    for unread in ("runs/shop/checkpoints/last.pt", "runs/pretrain/checkpoints/last.pt"):
        (root / unread).unlink()  # nothing documented here reads it (resume is prose); copies stay small
    # Relative links, so that they point into each test's copy of the world.
    links = {"run/checkpoints/best.pt": best, "best.pt": best}
    links |= {f"runs/glyph-gamma/{cell}/seed-0": "runs/shop" for cell in ("a", "b")}
    for link, target in links.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(os.path.relpath(root / target, (root / link).parent))


# The world's checkpoints, exports and weights: a command replaces such a file whole (temporary file + rename, as the
# toolkit writes them) and never edits one in place, so each copy of the world hard-links them instead of copying
# some 60 MB a test. The world's teardown checks that no command changed one.
LINKED = (".pt", ".onnx", ".safetensors")


def _link_or_copy(source: str, target: str) -> None:
    if source.endswith(LINKED):
        os.link(source, target)
    else:
        shutil.copy2(source, target)


def _linked_digests(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.name.endswith(LINKED) and path.is_file() and not path.is_symlink()
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("world")
    said = io.StringIO()  # not the output of the test that asks for the world first, which its pattern reads
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            _build_world(root)
    except BaseException:
        print(said.getvalue())
        raise
    linked = _linked_digests(root)
    yield root
    assert _linked_digests(root) == linked, "a command edited a hard-linked file of the world in place: copy it"


def _params() -> Iterator[object]:
    for command, entry in COMMANDS.items():
        yield pytest.param(command, entry, id=command[:90])


@pytest.mark.slow
@pytest.mark.parametrize(("command", "entry"), list(_params()))
def test_documented_command_runs(
    command: str,
    entry: Run | Skip,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    if isinstance(entry, Skip):
        pytest.skip(entry.reason)
    world = request.getfixturevalue("world")  # not for a skip: the world costs a training run
    here = tmp_path / "world"
    shutil.copytree(world, here, symlinks=True, copy_function=_link_or_copy)
    for path in entry.fresh:
        shutil.rmtree(here / path, ignore_errors=True)
    monkeypatch.chdir(here)
    text = command
    for documented, replacement in entry.replace.items():
        assert documented in text, f"{documented!r} is not in the command any more"
        text = text.replace(documented, replacement)
    argv = shlex.split(text + (" " + TRAIN_BUDGET if entry.train else ""))
    _serve_without_a_server(monkeypatch)
    code = _run(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{text}\nexit code {code}\n{out}\n{err}"
    assert re.search(entry.expect, out + err), f"{text}\nno match for {entry.expect!r} in\n{out}\n{err}"


def _run(argv: list[str]) -> int:
    """Exit code of one command line, run in this process."""
    if argv[0] == "python":
        tool = load_tool(Path(argv[1]).stem)
        try:
            return tool.main(argv[2:]) or 0
        except SystemExit as exc:
            return int(exc.code or 0)
    assert argv[0] == "retrieval", argv
    try:
        return main(argv[1:])
    except SystemExit as exc:  # argparse: an unknown option
        return int(exc.code or 0)


def _serve_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """`uvicorn.run(app)`, instead of serving, asks the app's `/healthz` and searches with `shoe.png` through a test
    client, and prints both answers."""
    import uvicorn
    from fastapi.testclient import TestClient

    def answer(app: object, **_: object) -> None:
        with TestClient(app) as client:
            print(json.dumps(client.get("/healthz").json()))
            found = client.post("/search", files={"image": ("shoe.png", Path("shoe.png").read_bytes(), "image/png")})
            print(f"search: {found.status_code}, {len(found.json()['results'])} results")

    monkeypatch.setattr(uvicorn, "run", answer)
