"""tools/bench.py: the machine record, and no result written from a busy machine unless asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.tools.tool_modules import load_tool

bench = load_tool("bench")


def test_machine_record_reads_the_cpu_and_its_speed_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    record = bench.machine_record(cpuinfo)
    assert record["cpu"] == "Test CPU 9000"
    assert record["cpu_flags"] == {"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": False,
                                   "amx_tile": False}  # fmt: skip
    assert record["versions"]["torch"] and record["cores"] >= 1


@pytest.fixture
def tiny_benchmark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    script = tmp_path / "bench_tiny.py"
    script.write_text("import sys\nprint('ratio 1.00x', *sys.argv[1:])\n")
    monkeypatch.setitem(bench.BENCHMARKS, "tiny", (str(script), ["--default"]))
    return "tiny"


@pytest.mark.slow
def test_a_busy_machine_refuses_the_result(tiny_benchmark: str) -> None:
    with pytest.raises(bench.LoadError, match=r"the machine used 3.00 cores before the run, above --max-load 0.50"):
        bench.run_benchmark(tiny_benchmark, [], max_load=0.5, allow_busy=False, load=lambda: 3.0)
    # Another process kept 1000 CPU seconds busy while the tiny benchmark ran: far above 0.5 cores.
    machine = iter([0.0, 1000.0])
    with pytest.raises(bench.LoadError, match=r"other processes used \d+\.\d+ cores during the run"):
        bench.run_benchmark(
            tiny_benchmark, [], max_load=0.5, allow_busy=False, load=lambda: 0.1, machine_busy=lambda: next(machine)
        )


@pytest.mark.slow
def test_the_benchmarks_own_cpu_is_not_counted_as_another_process(tiny_benchmark: str, tmp_path: Path) -> None:
    spin = tmp_path / "bench_spin.py"
    spin.write_text("import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\n")
    bench.BENCHMARKS[tiny_benchmark] = (str(spin), [])
    # The machine's busy time grows by exactly what the benchmark used: nobody else ran.
    _, header = bench.run_benchmark(
        tiny_benchmark, [], max_load=0.5, allow_busy=False, load=lambda: 0.0, machine_busy=bench.children_cpu_seconds
    )
    assert header["seconds"] >= 1.0 and header["others_cores"] == 0.0 and not header["busy"], header


def test_busy_cpu_seconds_reads_the_first_line_of_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 9999 7 0 0 0 0 0\ncpu0 50 0 25 5000 3 0 0 0 0 0\n")
    assert bench.busy_cpu_seconds(stat) == pytest.approx(150 / os.sysconf("SC_CLK_TCK"))


@pytest.mark.slow
def test_allowed_busy_results_are_marked_and_quiet_ones_are_not(tiny_benchmark: str) -> None:
    output, header = bench.run_benchmark(tiny_benchmark, ["--x"], max_load=0.5, allow_busy=True, load=lambda: 3.0)
    assert output == "ratio 1.00x --default --x\n" and header["busy"] is True
    assert bench._result_text(output, header, {}).startswith("BUSY")
    output, header = bench.run_benchmark(
        tiny_benchmark, [], max_load=0.5, allow_busy=False, load=lambda: 0.2, machine_busy=bench.children_cpu_seconds
    )
    assert header["busy"] is False and header["cores_before"] == 0.2
    assert not bench._result_text(output, header, {}).startswith("BUSY")


@pytest.mark.slow
def test_main_refuses_a_busy_machine_with_exit_2_and_writes_no_result(
    tiny_benchmark: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main([tiny_benchmark, "--out", str(tmp_path / "out"), "--max-load", "-1"]) == 2
    assert "nothing written" in capsys.readouterr().err
    assert not (tmp_path / "out" / f"{tiny_benchmark}.txt").exists()
    assert bench.main([tiny_benchmark, "--out", str(tmp_path / "out"), "--max-load", "1000"]) == 0
    text = (tmp_path / "out" / f"{tiny_benchmark}.txt").read_text()
    assert "ratio 1.00x --default" in text and '"cores_before"' not in text.split("\n\n")[1]
    assert json.loads((tmp_path / "out" / "machine.json").read_text())["cores"] >= 1


def test_main_refuses_unknown_names_and_shared_extra_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["nope", "--out", "x"]) == 2
    assert "unknown benchmark(s) ['nope']" in capsys.readouterr().err
    assert bench.main(["losses", "eval", "--out", "x", "--", "--threads", "2"]) == 2
    assert "go to exactly one named benchmark" in capsys.readouterr().err


def test_arguments_after_the_separator_reach_the_one_named_benchmark(tiny_benchmark: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert bench.main([tiny_benchmark, "--out", str(out), "--max-load", "1000", "--", "--quantize", "int8"]) == 0
    assert "ratio 1.00x --default --quantize int8" in (out / f"{tiny_benchmark}.txt").read_text()
