"""The token accounting of a run's recent steps, kept in the store for the dashboard's training page.

The dashboard reads the store, not the metrics file; so after every metrics record the algorithm saves
its last `REPORT_STEPS` steps' `tokens/*` and `staleness_<n>` values as an `AlgorithmState` in the bundle
`<algorithm>-tokens-state` (e.g. `grpo-tokens-state`), then re-publishes its training resources so that
the store's latest bundle stays one an agent can run with.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence, Tuple

from ...store.base import LightningStore
from ...types import NamedResources
from ..state import save_algorithm_state, state_resources_id

__all__ = ["REPORT_STEPS", "publish_token_report", "token_report_resources_id"]

logger = logging.getLogger(__name__)

REPORT_STEPS = 200
"""Steps kept in the published report (the metrics file keeps all of them)."""


def _run_name(algorithm: str) -> str:
    return f"{algorithm.lower()}-tokens"


def token_report_resources_id(algorithm: str) -> str:
    """The resources id the report of `algorithm` ("GRPO", "RFT") is saved under."""
    return state_resources_id(_run_name(algorithm))


async def publish_token_report(
    store: LightningStore,
    algorithm: str,
    steps: Sequence[Dict[str, float]],
    train_resources: Optional[Tuple[str, NamedResources]],
) -> None:
    """Save the last steps' token accounting; a store that refuses is logged, never fatal to training."""
    recent: List[Dict[str, float]] = list(steps[-REPORT_STEPS:])
    try:
        await save_algorithm_state(
            store,
            algorithm=algorithm.lower(),
            run=_run_name(algorithm),
            state={"steps": recent},
            publish_after=train_resources,
        )
    except Exception as exc:  # the report is for display; training goes on without it
        logger.warning("%s: could not save the token accounting report in the store: %s", algorithm, exc)
