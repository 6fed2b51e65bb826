"""The rollout-flow and headline benchmarks run on real stores and account for every flow (no timing checks)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("target", ["memory", "sqlite"])
def test_flow_bench_runs_every_flow_with_its_spans(target: str) -> None:
    bench = _load("flow_bench")
    result = bench.bench(target, 12, 3, profile_lines=5 if target == "memory" else 0)
    assert result.flows == 12 and len(result.latencies) == 12
    assert result.seconds > 0 and result.cpu_seconds >= 0
    row = result.as_json()
    assert row["target"] == target and row["flows"] == 12
    assert (result.profile is not None) == (target == "memory")


def test_headline_reports_each_missing_figure_with_its_reason() -> None:
    headline = _load("headline")
    errors = {part: f"{part} broke" for part in headline.PARTS}
    figures = headline.build_figures({}, errors)
    assert len(figures) == 7
    assert all(f.met is None and f.value is None and f.ours.startswith("n/a") for f in figures)
    assert "n/a (flows broke)" in figures[0].ours and "n/a (ceilings broke)" in figures[0].ceiling
    assert "n/a (policy broke)" in figures[-1].ours


def test_headline_runs_a_part_as_a_subprocess_and_reads_its_json(tmp_path: Path) -> None:
    headline = _load("headline")
    data, why = headline.run_part("ceilings", ["ceilings.py", "--only", "sqlite", "--quick"], tmp_path / "c.json", 120)
    assert why == "" and data is not None
    assert data["sqlite"]["commits_per_second_full"] > 0 and data["sqlite"]["commits_per_second_normal"] > 0
    broken, why = headline.run_part("ceilings", ["ceilings.py", "--only", "nope"], tmp_path / "x.json", 120)
    assert broken is None and why.startswith("exit 2")
