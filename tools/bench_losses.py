"""Benchmark every loss, forward + backward, against a baseline run in the same process.

Every row times one forward and backward pass (gradients for the embeddings and any proxies)
of one loss and of its baseline on the same inputs, interleaved pass by pass and row by row so
that machine noise hits both (see `time_cases`), and reports the ratio of the best passes.

Proxy losses against pytorch-metric-learning (PML), B = 128, D = 128, K in {100, 1000, 11318}
classes, baseline PML `ProxyNCALoss(distance=CosineSimilarity(), softmax_scale=16)`:
- `ProxyNCALoss(scale=16)`, target <= 1.0x; `AnchorLoss(gamma=16)`, target <= 1.15x.
- `ArcFaceLoss`, `CosFaceLoss` against PML's `ArcFaceLoss` / `CosFaceLoss` (s = 30), target <= 1.0x.

Every proxy loss against our `ProxyNCALoss(scale=16)` (the "vs" rows), same batches:
- gated `ProxyNCALoss(gate="ct"|"mt")` (past its warm-up) over `ProxyNCALoss`, and gated
  `AnchorLoss` over `AnchorLoss`: target <= 1.10x (gating is a few (B,) operations);
- `FocalProxyLoss(gamma=2)` over `ProxyNCALoss`: target <= 1.10x;
- `ArcFaceLoss`, `CosFaceLoss`, `AsymmetricProxyLoss` (multi-hot targets, 2 labels per sample),
  `ProxyAnchorLoss`: reported, no target.

Pair losses on P x 4 batches, B in {128, 256, 512}, D = 128:
- `CircleLoss(m=0.25, gamma=256)` vs PML `CircleLoss` with the same m and gamma, target <= 1.0x;
- `TripletLoss(margin=0.2, miner="all")` vs PML `TripletMarginLoss(margin=0.2)`, target <= 1.0x;
- `TripletLoss(miner="batch_hard")` vs PML `BatchHardMiner` + `TripletMarginLoss`, target <= 1.2x;
- `TripletLoss(miner="semihard")` vs PML `TripletMarginMiner(type_of_triplets="semihard")` +
  `TripletMarginLoss`, target <= 1.2x (PML keeps every semi-hard triplet, ours one per positive pair).

Usage: .venv/bin/python tools/bench_losses.py [--quick] [--device cpu] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from pytorch_metric_learning import distances as pml_distances
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners
from torch import Tensor, nn

from retrieval.losses import (
    AnchorLoss,
    ArcFaceLoss,
    AsymmetricProxyLoss,
    CircleLoss,
    CosFaceLoss,
    FocalProxyLoss,
    ProxyAnchorLoss,
    ProxyNCALoss,
    TripletLoss,
)

DIM = 128
PROXY_BATCH = 128
PROXY_CLASSES = (100, 1000, 11318)
PAIR_BATCHES = (128, 256, 512)
K_PER_CLASS = 4
MARGIN = 0.2
_CHEAP_PASS_S = 0.01  # passes faster than this are repeated within a round ...
_MAX_REPEATS = 10  # ... up to this many times


@dataclass(frozen=True)
class Case:
    """One row of the table: our loss and its baseline as zero-argument forward passes."""

    loss: str  # row label
    setting: str  # batch, dimension, classes
    ours: Callable[[], Tensor]
    baseline: Callable[[], Tensor]
    target: float | None  # largest acceptable ratio ours / baseline; None: reported only


def time_cases(cases: list[Case], device: torch.device, rounds: int) -> list[tuple[float, float]]:
    """Best seconds of one forward + backward of each case's loss and baseline.

    After two warm-up passes of each, every round times passes of every case's loss and
    baseline, one right after the other (in swapped order every other round). A busy period of
    the machine thus spoils a round, not a whole row, and hits a loss and its baseline alike;
    interference only adds time, so each one's fastest pass is its least noisy estimate. Cases
    faster than `_CHEAP_PASS_S` get up to `_MAX_REPEATS` passes per round, so that sub-millisecond
    rows, where a 10% difference is tens of microseconds, are sampled as densely as slow ones.
    """

    def timed(forward: Callable[[], Tensor]) -> float:
        _synchronize(device)
        start = time.perf_counter()
        forward().backward()
        _synchronize(device)
        return time.perf_counter() - start

    repeats = []
    for case in cases:
        warm = min(max(timed(case.ours), timed(case.baseline)) for _ in range(2))
        repeats.append(max(1, min(_MAX_REPEATS, int(_CHEAP_PASS_S / warm))))
    best = [[float("inf"), float("inf")] for _ in cases]
    for round_index in range(rounds):
        for case, times, repeat in zip(cases, best, repeats, strict=True):
            for _ in range(repeat):
                for which in (0, 1) if round_index % 2 == 0 else (1, 0):
                    times[which] = min(times[which], timed((case.ours, case.baseline)[which]))
    return [(ours, baseline) for ours, baseline in best]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _forward(loss: nn.Module, embeddings: Tensor, labels: Tensor) -> Callable[[], Tensor]:
    """A forward pass on fixed inputs that clears the gradients of the previous pass first."""

    def run() -> Tensor:
        embeddings.grad = None
        loss.zero_grad(set_to_none=True)
        return loss(embeddings, labels)

    return run


def _mined_forward(loss: nn.Module, miner: nn.Module, embeddings: Tensor, labels: Tensor) -> Callable[[], Tensor]:
    """A PML forward pass with its miner run on the same batch first, as in a PML training step."""

    def run() -> Tensor:
        embeddings.grad = None
        return loss(embeddings, labels, miner(embeddings, labels))

    return run


def proxy_cases(device: torch.device) -> list[Case]:
    """Our proxy losses against PML's, then every proxy loss against our ProxyNCA; B = 128, D = 128."""
    return [case for num_classes in PROXY_CLASSES for case in _proxy_cases_at(num_classes, device)]


def _proxy_cases_at(num_classes: int, device: torch.device) -> list[Case]:
    """The proxy rows at K classes, all on the same batch."""
    embeddings = torch.randn(PROXY_BATCH, DIM, device=device, requires_grad=True)
    labels = torch.randint(num_classes, (PROXY_BATCH,), device=device)
    multi_hot = torch.zeros(PROXY_BATCH, num_classes, device=device)
    multi_hot[torch.arange(PROXY_BATCH), labels] = 1
    multi_hot[torch.arange(PROXY_BATCH), torch.randint(num_classes, (PROXY_BATCH,), device=device)] = 1
    setting = f"B={PROXY_BATCH} D={DIM} K={num_classes}"

    def case(name: str, loss: nn.Module, base: nn.Module, target: float | None, targets: Tensor = labels) -> Case:
        ours = _forward(loss.to(device), embeddings, targets)
        return Case(name, setting, ours, _forward(base.to(device), embeddings, labels), target)

    pml_nca = pml_losses.ProxyNCALoss(
        num_classes=num_classes, embedding_size=DIM, distance=pml_distances.CosineSimilarity(), softmax_scale=16
    )
    pml_arcface = pml_losses.ArcFaceLoss(num_classes, DIM, margin=28.6, scale=30)
    pml_cosface = pml_losses.CosFaceLoss(num_classes, DIM, margin=0.35, scale=30)
    proxy_nca = ProxyNCALoss(num_classes, DIM, scale=16.0)
    anchor = AnchorLoss(num_classes, DIM, gamma=16.0)
    return [
        case("ProxyNCA", proxy_nca, pml_nca, 1.0),
        case("Anchor", anchor, pml_nca, 1.15),
        case("ArcFace", ArcFaceLoss(num_classes, DIM), pml_arcface, 1.0),
        case("CosFace", CosFaceLoss(num_classes, DIM), pml_cosface, 1.0),
        case("ProxyNCA gate=ct vs", _gated(ProxyNCALoss(num_classes, DIM, gate="ct")), proxy_nca, 1.10),
        case("ProxyNCA gate=mt vs", _gated(ProxyNCALoss(num_classes, DIM, gate="mt")), proxy_nca, 1.10),
        case("Anchor gate=mt vs", _gated(AnchorLoss(num_classes, DIM, gate="mt")), anchor, 1.10),
        case("FocalProxy vs", FocalProxyLoss(num_classes, DIM), proxy_nca, 1.10),
        case("ArcFace vs", ArcFaceLoss(num_classes, DIM), proxy_nca, None),
        case("CosFace vs", CosFaceLoss(num_classes, DIM), proxy_nca, None),
        case("Asymmetric vs", AsymmetricProxyLoss(num_classes, DIM), proxy_nca, None, multi_hot),
        case("ProxyAnchor vs", ProxyAnchorLoss(num_classes, DIM), proxy_nca, None),
    ]


def _gated(loss: ProxyNCALoss | AnchorLoss) -> nn.Module:
    """A gated loss past its warm-up, so that its weights are computed and applied."""
    loss.set_epoch(loss.weighting.warmup_epochs)
    return loss


def pair_cases(device: torch.device) -> list[Case]:
    """Circle and Triplet (each miner) against PML on P x 4 batches, D = 128."""
    cases = []
    for batch in PAIR_BATCHES:
        embeddings = torch.randn(batch, DIM, device=device, requires_grad=True)
        labels = torch.arange(batch // K_PER_CLASS, device=device).repeat_interleave(K_PER_CLASS)
        setting = f"B={batch} D={DIM} K={K_PER_CLASS}"
        pml_triplet = pml_losses.TripletMarginLoss(margin=MARGIN)
        cases += [
            Case(
                "Circle",
                setting,
                _forward(CircleLoss(m=0.25, gamma=256.0), embeddings, labels),
                _forward(pml_losses.CircleLoss(m=0.25, gamma=256.0), embeddings, labels),
                1.0,
            ),
            Case(
                "Triplet all",
                setting,
                _forward(TripletLoss(margin=MARGIN, miner="all"), embeddings, labels),
                _forward(pml_triplet, embeddings, labels),
                1.0,
            ),
            Case(
                "Triplet batch_hard",
                setting,
                _forward(TripletLoss(margin=MARGIN, miner="batch_hard"), embeddings, labels),
                _mined_forward(pml_triplet, pml_miners.BatchHardMiner(), embeddings, labels),
                1.2,
            ),
            Case(
                "Triplet semihard",
                setting,
                _forward(TripletLoss(margin=MARGIN, miner="semihard"), embeddings, labels),
                _mined_forward(
                    pml_triplet,
                    pml_miners.TripletMarginMiner(margin=MARGIN, type_of_triplets="semihard"),
                    embeddings,
                    labels,
                ),
                1.2,
            ),
        ]
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="best of 5 rounds instead of 25")
    parser.add_argument("--device", default="cpu", help="torch device to run on (default: cpu)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = 5 if args.quick else 25

    torch.manual_seed(0)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads, best of {rounds} rounds")
    header = f"{'loss':<22}{'setting':<24}{'ours ms':>10}{'base ms':>10}{'ratio':>8}{'target':>8}  "
    print("base: PML's equivalent; rows ending in 'vs': our ProxyNCALoss (gated Anchor: our AnchorLoss)")
    print(header)
    print("-" * len(header))
    misses = 0
    cases = proxy_cases(device) + pair_cases(device)
    for case, (ours_s, baseline_s) in zip(cases, time_cases(cases, device, rounds), strict=True):
        ratio = ours_s / baseline_s
        ok = case.target is None or ratio <= case.target
        misses += not ok
        target = "-" if case.target is None else f"{case.target:.2f}x"
        verdict = "" if case.target is None else ("ok" if ok else "MISS")
        print(
            f"{case.loss:<22}{case.setting:<24}{1e3 * ours_s:>10.2f}{1e3 * baseline_s:>10.2f}"
            f"{ratio:>7.2f}x{target:>8}  {verdict}"
        )
    print(f"{misses} row(s) above target" if misses else "all rows within target")


if __name__ == "__main__":
    main()
