"""Run the `tools/bench_*.py` set on a quiet machine and keep each result with the machine it came from.

A speed figure is only worth what the machine was doing while it was taken: on a 2-core machine
running other jobs, OpenMP pools wait on descheduled threads and every ratio measures the others.
So each benchmark runs in its own process, with the CPU the machine used over 2 s before it and
the CPU other processes used while it ran (machine-wide busy time from /proc/stat less the
benchmark's own CPU time, in cores) read after it. The 1-minute load average is no use here: it
still counts the previous benchmark a minute later, and counts the benchmark itself after it.
The output is written only when neither reading is above `--max-load` (default: a quarter of
the cores). A busy reading refuses the result (exit code 2, nothing written) unless
`--allow-busy`, which writes it marked `BUSY` in its header.

Each result is `OUT/<name>.txt`: a header (command, date, both readings, the machine
record) and the benchmark's own output, with its ratios against the baseline it times in the
same process. `OUT/machine.json` holds the machine record: CPU model and the flags that change
speed (AVX2, AVX-512, AVX512-BF16, AMX), cores, the thread settings, Python and library versions.

    python tools/bench.py --out bench-results                      # every benchmark, defaults
    python tools/bench.py --out bench-results onnx -- --threads 2   # arguments after -- go to one benchmark
    python tools/bench.py --list
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from retrieval.runtime.files import write_text

__all__ = ["BENCHMARKS", "LoadError", "machine_record", "main", "run_benchmark"]

TOOLS = Path(__file__).resolve().parent

# Name -> (script, extra arguments that keep the default run within minutes on 2 cores).
BENCHMARKS: dict[str, tuple[str, list[str]]] = {
    "losses": ("bench_losses.py", ["--quick"]),
    "eval": ("bench_eval.py", []),
    "train": ("bench_train.py", []),
    "diagnostics": ("bench_diagnostics.py", []),
    "onnx": ("bench_onnx.py", []),
    "index": ("bench_index.py", ["--sizes", "100000"]),
    "serve": ("bench_serve.py", []),
    "bf16": ("bench_bf16.py", []),
    "reranker": ("bench_reranker.py", []),
    "optimizer": ("bench_optimizer.py", []),
}

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
LIBRARIES = ("torch", "timm", "faiss-cpu", "numpy", "onnxruntime", "pytorch-metric-learning", "fastapi", "uvicorn")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")


class LoadError(RuntimeError):
    """The machine was busier than `--max-load` around a benchmark, so its figures are not the toolkit's."""


def machine_record(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """What the figures depend on: CPU model and speed flags, cores, thread settings, versions."""
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    model = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor()
    )
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": model,
        "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS},
        "cores": os.cpu_count(),
        "threads": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def busy_cpu_seconds(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds the whole machine has spent busy since boot (every state but idle and iowait)."""
    fields = [int(value) for value in stat.read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds used by this process's finished children (the benchmark, once it has exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def busy_cores_now(seconds: float = 2.0) -> float:
    """The CPU the whole machine uses right now, in cores, averaged over `seconds`."""
    start = busy_cpu_seconds()
    time.sleep(seconds)
    return (busy_cpu_seconds() - start) / seconds


def run_benchmark(
    name: str,
    extra: Sequence[str],
    max_load: float,
    allow_busy: bool,
    load: Callable[[], float] = busy_cores_now,
    machine_busy: Callable[[], float] = busy_cpu_seconds,
) -> tuple[str, dict]:
    """Run benchmark `name` with `extra` arguments; return its output and a header record.

    `others_cores` in the header is the CPU other processes used during the run, averaged over it.

    Raises:
        LoadError: the cores busy before (`cores_before`) or used by others during (`others_cores`)
            were above `max_load`, and not `allow_busy`.
    """
    script, defaults = BENCHMARKS[name]
    command = [sys.executable, str(TOOLS / script), *defaults, *extra]
    before = load()
    if before > max_load and not allow_busy:
        raise LoadError(f"{name}: the machine used {before:.2f} cores before the run, above --max-load {max_load:.2f}")
    start, busy_start, own_start = time.time(), machine_busy(), children_cpu_seconds()
    done = subprocess.run(command, capture_output=True, text=True, cwd=TOOLS.parent)
    seconds = max(time.time() - start, 1e-6)
    others = max(0.0, (machine_busy() - busy_start) - (children_cpu_seconds() - own_start)) / seconds
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    busy = max(before, others) > max_load
    if busy and not allow_busy:
        raise LoadError(
            f"{name}: other processes used {others:.2f} cores during the run, above --max-load {max_load:.2f}"
        )
    header = {
        "benchmark": name,
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(start)),
        "seconds": round(seconds, 1),
        "cores_before": round(before, 2),
        "others_cores": round(others, 2),
        "max_load": max_load,
        "busy": busy,
    }
    return done.stdout, header


def _result_text(output: str, header: dict, machine: dict) -> str:
    mark = "BUSY (taken above --max-load: not a figure to plan with)\n" if header["busy"] else ""
    lines = [f"# {key}: {json.dumps(value)}" for key, value in header.items()]
    lines += [f"# machine: {json.dumps(machine)}"]
    return mark + "\n".join(lines) + "\n\n" + output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, help="folder for <name>.txt and machine.json")
    parser.add_argument(
        "--max-load", type=float, default=(os.cpu_count() or 1) / 4, help="bound on the cores other processes use"
    )
    parser.add_argument("--allow-busy", action="store_true", help="write results taken above --max-load, marked BUSY")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    if args.list:
        for name, (script, defaults) in BENCHMARKS.items():
            print(f"{name:12s} tools/{script} {' '.join(defaults)}")
        return 0
    unknown = [name for name in args.names if name not in BENCHMARKS]
    problem = (
        f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}"
        if unknown
        else "--out is required"
        if args.out is None
        else f"arguments after -- ({' '.join(extra)}) go to exactly one named benchmark"
        if extra and len(args.names) != 1
        else None
    )
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    machine = machine_record()
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "machine.json", json.dumps(machine, indent=2) + "\n")
    for name in args.names or list(BENCHMARKS):
        try:
            output, header = run_benchmark(name, extra, args.max_load, args.allow_busy)
        except LoadError as exc:
            print(f"error: {exc}; nothing written (wait for a quiet machine, or --allow-busy)", file=sys.stderr)
            return 2
        path = args.out / f"{name}.txt"
        write_text(path, _result_text(output, header, machine))
        print(
            f"{name}: {header['seconds']} s, machine {header['cores_before']} cores before, "
            f"others {header['others_cores']} cores during: {path}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
