"""Dev benchmark: the toolkit against a plain timm + PML script at the same budget, over seeds.

Every row trains the same backbone at the same image size, batch size, epochs and CPU thread
count (OMP_NUM_THREADS and --threads, which change CPU results), once per seed:

- `peer-<loss>` for each `--peer` loss: tools/plain_pml_script.py (PML's loss with its defaults,
  Adam, constant lr, light affine filled with the background, last epoch);
- `toolkit-<loss>` for each `--toolkit` loss: `retrieval train --config CONFIG --set loss.name=<loss>`
  plus `--set` overrides for the shared budget and any `--toolkit-set`;
- one row per `--variant NAME=LOSS:KEY=VALUE,KEY=VALUE` (an ablation): the toolkit row of LOSS
  with those overrides on top;
- one row per `--rerank NAME=ROW:METHOD` (no training): ROW's embeddings of each seed re-ranked
  with METHOD (`qe`, `dba`, `kreciprocal`), its parameters chosen on that seed's validation split as
  `retrieval evaluate --rerank METHOD` chooses them. Its validation columns are the chosen
  parameters' own (optimistic); its test columns are scored once, with the choice.

Every row reports its LAST epoch (the toolkit evaluates once, after it), so no row selects
anything. Each run's validation and test images are then scored by the toolkit's own per-query
code (`retrieval.metrics.per_query_scores`): the peer's saved embeddings, and the toolkit's
`best.pt` (= its last epoch) embedded through `ImageEncoder`. `--pair A B` rows of the table
give A - B on the same queries with a 95% class-bootstrap interval (`retrieval compare`'s
arithmetic), per seed and on the per-query values averaged over the seeds, for validation and
for test: decide on the validation columns, report the test ones.

Results are kept in OUT/runs/<row>-s<seed>/ (log, command, per_query_val.npz,
per_query_test.npz, result.json) and reused on the next call unless `--force`, when the command
and the bytes of every file it names (the config, the CSV, `model.weights`, the plain script)
are the same: a run of an edited config is run again, never paired as if current (a change to
the toolkit's own code is not seen: `--force`). OUT/table.md and OUT/results.json collect them.

    python tools/dev_benchmark.py --csv glyphs64/dataset.csv --out bench64 --image-size 64 \\
        --epochs 6 --seeds 0 1 2 --peer proxy_nca --toolkit proxy_nca \\
        --variant avg=proxy_nca:model.pooling=avg --pair toolkit-proxy_nca peer-proxy_nca
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_metric_learning
import timm
import torch

from retrieval.config import DataConfig
from retrieval.core.rerank import RERANK_METHODS
from retrieval.data.csv_dataset import CsvSplit
from retrieval.data.datasets import EvalSplit
from retrieval.data.splits import read_splits
from retrieval.evaluate.evaluator import KS
from retrieval.evaluate.rerank_choice import choose_rerank
from retrieval.evaluate.uncertainty import QueryValues, compare_runs, load_query_values, save_query_values
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.metrics import per_query_scores
from retrieval.runtime.files import file_sha256, write_text

__all__ = [
    "Row",
    "average_values",
    "build_rows",
    "main",
    "named_files",
    "parse_metrics",
    "parse_rerank_row",
    "parse_variant",
    "score_embeddings",
]

ROOT = Path(__file__).resolve().parent.parent
SPLITS = ("val", "test")
METRICS = {"recall@1": "R@1", "map@r": "MAP@R"}
_SCORING = threading.Lock()  # one scoring at a time in this process, whatever --jobs runs in parallel
_METRIC = re.compile(r"^(Recall@1|MAP@R): ([0-9.]+)(?:\s+\((.+)\))?\s*$", re.MULTILINE)  # (label) optional


@dataclass(frozen=True)
class Row:
    """One pipeline of the table: its name, what the table says it is, and its command for a seed."""

    name: str
    pipeline: str
    command: list[str]  # without the seed and output arguments, which `seeded` adds
    peer: bool
    rerank: tuple[str, str] | None = None  # (source row, method) of a re-ranking row, which trains nothing

    def seeded(self, seed: int, run_dir: Path) -> list[str]:
        """The command of one seed, writing into `run_dir`."""
        if self.rerank is not None:
            return [*self.command, f"--seed={seed}"]
        if self.peer:
            return [*self.command, f"--seed={seed}", f"--embeddings-out={run_dir}", f"--json={run_dir / 'peer.json'}"]
        return [*self.command, "--set", f"train.seed={seed}", "--output-dir", str(run_dir / "run")]


def named_files(command: Sequence[str]) -> dict[str, str]:
    """sha256 of every file the command names, as an argument or as a `KEY=PATH` value (the program itself aside)."""
    files = {}
    for token in command[1:]:
        path = Path(token.rpartition("=")[2])
        if path.is_file():
            files[str(path)] = file_sha256(path)
    return files


def parse_metrics(output: str) -> dict[str, float]:
    """The last `Recall@1: x` and `MAP@R: x` lines of a run's output; missing ones are absent.

    A label the toolkit appends to its figures (`Recall@1: 0.9 (selected on test)`) is kept as `label`.
    """
    found: dict = {}
    for name, value, label in _METRIC.findall(output):
        found[{"Recall@1": "recall@1", "MAP@R": "map@r"}[name]] = float(value)
        if label:
            found["label"] = label
    return found


def parse_variant(text: str) -> tuple[str, str, list[str]]:
    """`NAME=LOSS:KEY=VALUE,KEY=VALUE` -> (NAME, LOSS, [KEY=VALUE, ...]); `NAME=LOSS:` has no overrides."""
    name, sep, rest = text.partition("=")
    loss, colon, sets = rest.partition(":")
    if not (name and sep and loss and colon):
        raise SystemExit(f"error: --variant {text!r} is not NAME=LOSS:KEY=VALUE,KEY=VALUE")
    return name, loss, [item for item in sets.split(",") if item]


def parse_rerank_row(text: str) -> tuple[str, str, str]:
    """`NAME=ROW:METHOD` -> (NAME, ROW, METHOD), METHOD a bare re-ranking method chosen on validation."""
    name, sep, rest = text.partition("=")
    source, colon, method = rest.partition(":")
    if not (name and sep and source and colon and method) or method not in RERANK_METHODS:
        raise SystemExit(f"error: --rerank {text!r} is not NAME=ROW:METHOD with METHOD one of {sorted(RERANK_METHODS)}")
    return name, source, method


def build_rows(args: argparse.Namespace) -> list[Row]:
    """Every row the flags describe, in table order: peers, toolkit losses, variants."""
    python = sys.executable
    peer = [python, str(ROOT / "tools" / "plain_pml_script.py"), f"--csv={args.csv}", f"--backbone={args.backbone}"]
    peer += [f"--image-size={args.image_size}", f"--batch-size={args.batch_size}", f"--epochs={args.epochs}"]
    peer += [f"--lr={args.lr}", f"--threads={args.threads}", f"--workers={args.workers}"]
    shared = [
        f"data.path={args.csv}",
        f"model.backbone={args.backbone}",
        f"data.image_size={args.image_size}",
        f"data.batch_size={args.batch_size}",
        f"data.num_workers={args.workers}",
        f"train.epochs={args.epochs}",
        f"train.eval_every={args.epochs}",  # one evaluation, after the last epoch: no selection
        f"train.threads={args.threads}",
        "train.device=cpu",
        *args.toolkit_set,
    ]

    def toolkit(name: str, label: str, loss: str, extra: Sequence[str]) -> Row:
        sets = [item for override in [*shared, f"loss.name={loss}", *extra] for item in ("--set", override)]
        command = [python, "-m", "retrieval.cli.main", "train", "--config", str(args.config), *sets]
        return Row(name, label, command, peer=False)

    rows = [Row(f"peer-{loss}", f"plain script, PML {loss}", [*peer, f"--loss={loss}"], True) for loss in args.peer]
    rows += [toolkit(f"toolkit-{loss}", f"toolkit {loss}", loss, []) for loss in args.toolkit]
    for text in args.variant:
        name, loss, sets = parse_variant(text)
        rows.append(toolkit(name, f"toolkit {loss}, {' '.join(sets) or 'as configured'}", loss, sets))
    for text in args.rerank:
        name, source, method = parse_rerank_row(text)
        if source not in {row.name for row in rows}:
            raise SystemExit(f"error: --rerank {text!r} names no row {source!r}; rows: {[row.name for row in rows]}")
        pipeline = f"{source} + {method} chosen on validation"
        rows.append(Row(name, pipeline, ["rerank", source, method], peer=False, rerank=(source, method)))
    return rows


def score_embeddings(csv_path: Path, split: str, embeddings: np.ndarray) -> QueryValues:
    """Per-query Recall@1 and AP@R of one split's embeddings (rows in the CSV's order of that split)."""
    return _score_rows(_read_splits(csv_path)[split], f"{split} rows of {csv_path}", embeddings)


def _read_splits(csv_path: Path) -> dict[str, CsvSplit]:
    return read_splits(DataConfig(name="csv", path=str(csv_path)))


def _score_rows(rows: CsvSplit, what: str, embeddings: np.ndarray) -> QueryValues:
    if len(embeddings) != len(rows.paths):
        raise SystemExit(f"error: {len(embeddings)} embeddings for the {len(rows.paths)} {what}")
    scores = per_query_scores(embeddings, rows.labels, KS, rows.query_mask, rows.gallery_mask)
    return QueryValues.from_scores(scores)


def _toolkit_embeddings(encoder: ImageEncoder, rows: CsvSplit) -> np.ndarray:
    embedded = encoder.embed_files(rows.paths, batch_size=256, progress=False)
    if embedded.failures:
        raise SystemExit(f"error: could not read {embedded.failures[0]}")
    return embedded.embeddings


def run_seed(row: Row, seed: int, args: argparse.Namespace) -> dict:
    """Run one row at one seed, or reuse its saved result: the same command, the files it names unchanged,
    and not killed by a signal (an interrupted run says nothing about its inputs; a failure that exits does)."""
    run_dir = args.out / "runs" / f"{row.name}-s{seed}"
    result_path, command = run_dir / "result.json", row.seeded(seed, run_dir)
    files = named_files(row.command)  # the inputs: the seeded command also names this run's own outputs
    if result_path.is_file() and not args.force:
        saved = json.loads(result_path.read_text())
        if saved.get("command") == command and saved.get("files", {}) == files and saved["exit_code"] >= 0:
            return saved
    run_dir.mkdir(parents=True, exist_ok=True)
    if row.rerank is not None:
        return _rerank_seed(row, seed, args, command)
    # torch takes its CPU thread count from OMP_NUM_THREADS; both pipelines also call set_num_threads.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    env["PYTHONPATH"] = str(ROOT)
    print(f"[{row.name} seed {seed}] {' '.join(command)}", flush=True)
    start = time.perf_counter()
    with (run_dir / "log.txt").open("w") as log:
        # In the caller's folder: a relative path in --variant or --toolkit-set means what was typed.
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    output = (run_dir / "log.txt").read_text()
    result: dict = {"row": row.name, "seed": seed, "seconds": seconds, "exit_code": code, "command": command}
    result["files"] = files
    if code != 0:
        result["error"] = (output.strip().splitlines() or ["no output"])[-1]
    else:
        _score_run(row, run_dir, args, result)
    write_text(result_path, json.dumps(result, indent=2))
    print(f"[{row.name} seed {seed}] {_brief(result)}", flush=True)
    return result


def _score_run(row: Row, run_dir: Path, args: argparse.Namespace, result: dict) -> None:
    """Score the run's val and test embeddings into per_query_<split>.npz and `result`'s means."""
    splits = _read_splits(args.csv)  # once for both splits, as the checkpoint is loaded once
    with _SCORING:
        embeddings = _run_embeddings(row, run_dir, splits)
        for split in SPLITS:
            values = _score_rows(splits[split], f"{split} rows of {args.csv}", embeddings[split])
            _record(run_dir, split, values, result)


def _run_embeddings(row: Row, run_dir: Path, splits: dict[str, CsvSplit]) -> dict[str, np.ndarray]:
    """A run's val and test embeddings: the peer's saved files, or the toolkit checkpoint's (saved beside it)."""
    if row.peer or all((run_dir / f"{split}.npy").is_file() for split in SPLITS):
        return {split: np.load(run_dir / f"{split}.npy") for split in SPLITS}
    encoder = ImageEncoder.from_checkpoint(run_dir / "run" / "checkpoints" / "best.pt", "cpu")
    embeddings = {split: _toolkit_embeddings(encoder, splits[split]) for split in SPLITS}
    for split, array in embeddings.items():
        np.save(run_dir / f"{split}.npy", array)
    return embeddings


def _record(run_dir: Path, split: str, values: QueryValues, result: dict) -> None:
    save_query_values(run_dir / f"per_query_{split}.npz", values)
    for key in METRICS:
        result[f"{split}/{key}"] = float(values.values[key].mean())


def _rerank_seed(row: Row, seed: int, args: argparse.Namespace, command: list[str]) -> dict:
    """Re-rank the source row's run of `seed`, the method's parameters chosen on its validation split."""
    assert row.rerank is not None
    source, method = row.rerank
    source_dir, run_dir = args.out / "runs" / f"{source}-s{seed}", args.out / "runs" / f"{row.name}-s{seed}"
    result: dict = {"row": row.name, "seed": seed, "seconds": 0.0, "exit_code": 0, "command": command}
    if not (source_dir / "result.json").is_file() or "error" in json.loads((source_dir / "result.json").read_text()):
        return {**result, "exit_code": 1, "error": f"no finished run of {source} at seed {seed}"}
    splits = _read_splits(args.csv)
    start = time.perf_counter()
    with _SCORING:
        source_row = Row(source, source, [], peer=(source_dir / "peer.json").is_file())
        embeddings = _run_embeddings(source_row, source_dir, splits)
        evaluated = {split: _eval_split(splits[split]) for split in SPLITS}
        choice = choose_rerank(method, (embeddings["val"], evaluated["val"]))
        for split in SPLITS:
            rows = splits[split]
            scores = per_query_scores(embeddings[split], rows.labels, KS, rows.query_mask, rows.gallery_mask,
                                      rerank=choice.reranker)  # fmt: skip
            _record(run_dir, split, QueryValues.from_scores(scores), result)
    result.update(seconds=time.perf_counter() - start, rerank=choice.record().model_dump())
    write_text(run_dir / "result.json", json.dumps(result, indent=2))
    print(f"[{row.name} seed {seed}] {choice.line()}; {_brief(result)}", flush=True)
    return result


def _eval_split(rows: CsvSplit) -> EvalSplit:
    """The labels and query/gallery protocol of a CSV split, as the evaluator scores it (no images needed)."""
    return EvalSplit(dataset=[], labels=rows.labels, query_mask=rows.query_mask, gallery_mask=rows.gallery_mask)


def _saved_results(args: argparse.Namespace, row: Row) -> list[dict]:
    files = [args.out / "runs" / f"{row.name}-s{seed}" / "result.json" for seed in args.seeds]
    return [json.loads(file.read_text()) for file in files if file.is_file()]


def average_values(files: Sequence[Path]) -> QueryValues:
    """Per-query values averaged over runs that scored the same queries (one run per seed)."""
    runs = [load_query_values(file) for file in files]
    first = runs[0]
    for other in runs[1:]:
        if not (np.array_equal(other.rows, first.rows) and np.array_equal(other.labels, first.labels)):
            raise SystemExit("error: runs of different queries cannot be averaged")
    values = {key: np.mean([run.values[key] for run in runs], axis=0) for key in first.values}
    return QueryValues(first.rows, first.labels, values)


def write_table(args: argparse.Namespace, rows: Sequence[Row], results: dict[str, list[dict]]) -> str:
    """Mean (sd) over seeds per row, then the paired differences asked for with `--pair`."""
    header = [f"{split} {short}" for split in SPLITS for short in METRICS.values()]
    lines = ["| row | pipeline | " + " | ".join(header) + " | seconds |", "|" + "---|" * (len(header) + 3)]
    for row in rows:
        if not results[row.name]:
            continue
        done = [r for r in results[row.name] if "error" not in r]
        cells = [_mean_sd([r[f"{split}/{key}"] for r in done]) for split in SPLITS for key in METRICS]
        failed = len(results[row.name]) - len(done)
        seconds = f"{np.mean([r['seconds'] for r in results[row.name]]):.0f}" + (
            f" ({failed} failed)" if failed else ""
        )
        lines.append(f"| {row.name} | {row.pipeline} | " + " | ".join(cells) + f" | {seconds} |")
    for a, b in args.pair:
        lines += ["", f"{a} - {b}, paired on the same queries (95% class-bootstrap interval):", ""]
        lines += ["| seeds | " + " | ".join(header) + " |", "|" + "---|" * (len(header) + 1)]
        for seed in [*args.seeds, None]:
            label = "mean of seeds" if seed is None else str(seed)
            cells = [cell for split in SPLITS for cell in _paired(args, a, b, seed, split)]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", _footer(args), ""])


def _paired(args: argparse.Namespace, a: str, b: str, seed: int | None, split: str) -> list[str]:
    """A - B on one split, a cell per metric from one load and one comparison; "-" where a run is missing."""
    seeds = args.seeds if seed is None else [seed]
    files = [[args.out / "runs" / f"{name}-s{s}" / f"per_query_{split}.npz" for s in seeds] for name in (a, b)]
    if not all(file.is_file() for group in files for file in group):
        return ["-"] * len(METRICS)
    intervals = compare_runs(average_values(files[0]), average_values(files[1]))
    return [f"{i.estimate:+.4f} [{i.low:+.4f}, {i.high:+.4f}]" for i in (intervals[key] for key in METRICS)]


def _mean_sd(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{np.mean(values):.4f}" + (f" ± {np.std(values, ddof=1):.4f}" if len(values) > 1 else "")


def _brief(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error'][:160]}"
    return "  ".join(f"{name} {result[name]:.4f}" for name in result if name.startswith(SPLITS))


def _footer(args: argparse.Namespace) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    return (
        f"{args.backbone} from scratch, {args.image_size} px, batch {args.batch_size}, {args.epochs} epochs, "
        f"lr {args.lr}, seeds {' '.join(map(str, args.seeds))}, last epoch; toolkit config {args.config.name}; "
        f"data {args.csv}; {args.threads} CPU threads and {args.workers} loader workers a run, {args.jobs} at once; "
        f"torch {torch.__version__}, timm {timm.__version__}, pytorch-metric-learning "
        f"{pytorch_metric_learning.__version__}; CPU: {cpu} ({os.cpu_count()} cores; seconds are indicative)."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, required=True, help="dataset CSV with train, val and test rows")
    parser.add_argument("--out", type=Path, required=True, help="folder for runs/, table.md, results.json")
    parser.add_argument("--peer", nargs="*", default=[], help="plain-script losses: proxy_nca proxy_anchor ...")
    parser.add_argument("--toolkit", nargs="*", default=[], help="toolkit losses (loss.name) on --config")
    parser.add_argument("--variant", action="append", default=[], help="NAME=LOSS:KEY=VALUE,... (repeatable)")
    parser.add_argument("--rerank", action="append", default=[], help="NAME=ROW:METHOD (repeatable)")
    parser.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"), help="rows to pair")
    parser.add_argument("--rows", nargs="*", help="run only these row names (the table shows what exists)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "csv_glyph.yaml", help="toolkit config")
    parser.add_argument("--toolkit-set", nargs="*", default=[], help="extra --set overrides for every toolkit row")
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (e.g. 2 runs of 1 thread on 2 cores)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers for every run")
    parser.add_argument("--force", action="store_true", help="re-run runs that have a saved result")
    args = parser.parse_args(argv)
    args.csv, args.out, args.config = args.csv.resolve(), args.out.resolve(), args.config.resolve()
    rows = build_rows(args)
    chosen = set(args.rows) if args.rows else None
    torch.set_num_threads(args.threads)  # the scoring's embedding, in this process
    # Seed-major: a first comparison is ready after one seed. --jobs runs that many at once.
    runs = [(row, seed) for seed in args.seeds for row in rows if chosen is None or row.name in chosen]
    trained = [run for run in runs if run[0].rerank is None]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda run: run_seed(run[0], run[1], args), trained))
    for row, seed in (run for run in runs if run[0].rerank is not None):  # after the runs they re-rank
        run_seed(row, seed, args)
    results = {row.name: _saved_results(args, row) for row in rows}
    table = write_table(args, rows, results)
    write_text(args.out / "table.md", table)
    write_text(args.out / "results.json", json.dumps(results, indent=2))
    print(table)


if __name__ == "__main__":
    main()
