"""The reference card's CPU path runs end to end on a tiny shape (a smoke test; no timings are checked)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.train


def test_the_card_runs_on_a_tiny_shape(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_card.py"
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("gpu_card", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tiny = "--models tiny-shape --quick --new-tokens 4 --poisson-requests 2 --learn-rows 2 --micro-batch 2"
        argv = tiny.split() + [
            "--prompts",
            "1",
            "--group",
            "2",
            "--prompt-tokens",
            "6",
            "--json",
            str(tmp_path / "c.json"),
        ]
        card = module.main(argv)
    finally:
        sys.path.remove(str(path.parent))
    (shape,) = card["shapes"]
    assert {r["system"] for r in shape["decode"]} == {"ours", "HF generate, eager"}
    assert [r["kind"] for r in shape["learner"]] == ["full", "LoRA r=8"]
    assert shape["step"]["rollouts"] == 2 and (tmp_path / "c.json").is_file()
