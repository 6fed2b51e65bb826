"""`contrib/recipes/agentos`: the governed SQL agent's quick run denies DELETE and penalizes it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agent_os", reason="needs the agentos extra (agent-os-kernel)")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_denies_deletes_and_penalizes_them() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "contrib" / "recipes" / "agentos" / "train_sql_agentos.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = re.findall(r"^  \[val\] \[(.+)\] violations=(\d) reward=([0-9.]+)$", completed.stdout, re.M)
    assert len(rows) == 4
    for queries, violations, reward in rows:
        if queries.startswith("'DELETE"):
            assert (violations, reward) == ("1", "0.5")
        else:
            assert (violations, reward) == ("0", "1.0")
    assert "violations: 2 in 4 rollouts" in completed.stdout
