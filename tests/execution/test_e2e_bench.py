"""The end-to-end benchmark runs and accounts for every rollout and span (a smoke test, no timing checks)."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "e2e_bench.py"


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("e2e_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["e2e_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("backend, mode", [("memory", "batch"), ("sqlite", "batch_partial")])
def test_small_run_accounts_for_all_rollouts_and_spans(backend: str, mode: str) -> None:
    bench = _load_bench()
    args = bench.parse_args(
        [
            "--total-tasks", "12", "--batch-size", "5", "--remaining-tasks", "4", "--n-runners", "2",
            "--max-rounds", "3", "--backend", backend, "--mode", mode,
        ]
    )  # fmt: skip
    result = bench.run(args)
    assert (result.rollouts, result.succeeded) == (12, 12)
    assert (result.spans, result.missing_spans) == (12 * 4, 0)


def test_client_server_run_leaves_no_http_session_open(capfd: pytest.CaptureFixture[str]) -> None:
    """Runner processes (with their heartbeat and span-delivery threads) close every aiohttp session they open."""
    bench = _load_bench()
    args = bench.parse_args(["--total-tasks", "4", "--batch-size", "2", "--n-runners", "2", "--max-rounds", "2"])
    # aiohttp reports a leaked session through the asyncio logger; send it to stderr in the forked runners too
    # (pytest's own log capture would keep it in the child's memory).
    handler = logging.StreamHandler(sys.stderr)
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(handler)
    try:
        result = bench.run(args)
    finally:
        asyncio_logger.removeHandler(handler)
    assert (result.rollouts, result.succeeded, result.missing_spans) == (4, 4, 0)
    err = capfd.readouterr().err
    assert "Unclosed client session" not in err
    assert "Unclosed connector" not in err


@pytest.mark.slow
def test_strategy_comparison_writes_a_json_row_per_strategy(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is part of the dev extra")
    bench = _load_bench()
    out = tmp_path / "bench.json"
    bench.main(
        ["--compare-strategies", "--total-tasks", "6", "--batch-size", "3", "--n-runners", "2",
         "--max-rounds", "1", "--json", str(out)]
    )  # fmt: skip
    import json

    rows = json.loads(out.read_text())
    assert [row["strategy"] for row in rows] == ["cs", "ray"]
    assert all((row["rollouts"], row["succeeded"], row["spans"]) == (6, 6, 12) for row in rows)
