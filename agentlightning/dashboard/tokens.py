"""The token accounting of the latest GRPO / RFT run, for the training page's per-step table.

The algorithm saves its recent steps' `tokens/*` and `staleness_<n>` metrics in the store as an
`AlgorithmState` under `<algorithm>-tokens-state` (see `algorithm/grpo/token_report.py`); this module only
reads that bundle, so the dashboard stays below the algorithms.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from agentlightning.store.base import LightningStore
from agentlightning.types import AlgorithmState

__all__ = ["TOKEN_REPORT_ALGORITHMS", "token_report"]

TOKEN_REPORT_ALGORITHMS = ("grpo", "rft")
"""Algorithms that publish a token report, by the lower-case name their bundle id starts with."""


async def token_report(store: LightningStore) -> Dict[str, Any]:
    """`{"algorithm", "updated", "steps": [...]}` of the most recently saved report (steps empty when none)."""
    found: Optional[Dict[str, Any]] = None
    for algorithm in TOKEN_REPORT_ALGORITHMS:
        update = await store.get_resources_by_id(f"{algorithm}-tokens-state")
        saved = update.resources.get("state") if update is not None else None
        if update is None or not isinstance(saved, AlgorithmState):
            continue
        steps: List[Any] = list(saved.state.get("steps") or [])
        updated = update.update_time
        if found is None or updated > found["updated"]:
            found = {"algorithm": saved.algorithm, "updated": updated, "steps": steps}
    return found or {"algorithm": None, "updated": None, "steps": []}
