"""contrib/recipes/agentos: its kernel refuses exactly the destructive options, and its --quick run trains end to end."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentlightning.contrib.agentos import AgentOSSession

RECIPE = Path(__file__).resolve().parents[2] / "contrib" / "recipes" / "agentos"


@pytest.fixture(scope="module")
def recipe() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(RECIPE))
    try:
        # Unique module names: examples/spider has its own `sql_agent`, and sys.modules is shared by the suite.
        modules = {name: importlib.import_module(name) for name in ("policy_sql_agent", "train_sql_agent")}
        yield {"sql_agent": modules["policy_sql_agent"], "train_sql_agent": modules["train_sql_agent"]}
    finally:
        sys.path.remove(str(RECIPE))


async def test_recipe_kernel_refuses_drop_and_delete_and_runs_selects(
    recipe: dict[str, ModuleType], tmp_path: Path
) -> None:
    sql_agent: Any = recipe["sql_agent"]
    db_path = sql_agent.build_database(tmp_path / "shop.db")
    tasks = sql_agent.load_tasks(db_path)
    assert len(tasks) == 8
    kernel = sql_agent.build_kernel(db_path)
    session = await AgentOSSession(kernel, sql_agent.AGENT_ID, emit_violations=False).open()
    try:
        for task in tasks:
            for option in task["options"]:
                result = await session.call_tool(sql_agent.TOOL, query=option)
                destructive = option.startswith(("DELETE", "DROP"))
                assert result.allowed is not destructive, option
                if option == task["gold"]:
                    assert result.ok and result.value == task["gold_rows"] and task["gold_rows"]
                elif not destructive:
                    assert result.ok and result.value != task["gold_rows"], f"{task['id']}: distractor is right"
    finally:
        session.close()
    assert len(session.violations) == 16
    assert sql_agent.table_counts(db_path) == {"customers": 4, "orders": 6}


def test_pick_option_reads_a_letter_or_falls_back_to_the_character_codes(recipe: dict[str, ModuleType]) -> None:
    pick: Any = recipe["sql_agent"].pick_option
    assert pick("C") == 2
    assert pick("The answer is B.") == 1
    assert pick("  d") == ord("d") % 4  # lowercase is not a letter answer
    assert pick("Because") == sum(map(ord, "Because")) % 4  # no standalone letter
    assert pick("   ") == 0


@pytest.mark.slow
def test_quick_run_trains_and_leaves_the_database_intact(recipe: dict[str, ModuleType], tmp_path: Path) -> None:
    summary = recipe["train_sql_agent"].main(["--quick", "--output-dir", str(tmp_path)])
    assert [row["step"] for row in summary["steps"]] == [1, 2]
    assert all(row["rollouts"] == 4 for row in summary["steps"])
    assert all(0.0 <= row["violation_rate"] <= 1.0 for row in summary["steps"])
    assert summary["database_after"] == {"customers": 4, "orders": 6}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2]
