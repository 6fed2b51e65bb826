"""Verified weight sync: after every update GRPO asks the policy server what it serves and checks it.

The server answers `GET /v1/weights/fingerprint` (`serving/fingerprint.py`): its weights version, its
adapters and checksums of a few watched tensors. The learner fingerprints its own weights the same way,
cast to the dtypes the server reports, and any difference stops the run with `WeightSyncError` naming the
tensor: a LoRA adapter never pushed, a tensor loaded into the wrong slot or a copy that did not happen
would otherwise train silently against the wrong policy.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict

from ...serving.fingerprint import FINGERPRINT_PATH, WeightsFingerprint, compare_fingerprints, fingerprint_of

if TYPE_CHECKING:
    from ...serving.server import PolicyServer
    from .learner import GRPOLearner

__all__ = ["WeightSyncError", "fetch_fingerprint", "verify_weight_sync"]

_SHOWN_PROBLEMS = 5


class WeightSyncError(RuntimeError):
    """The policy server does not serve the weights the learner trained."""


def fetch_fingerprint(endpoint: str, per_layer: int, timeout_s: float = 60.0) -> WeightsFingerprint:
    """The fingerprint a policy server at `endpoint` (its `.../v1` base URL) reports."""
    import httpx

    base = endpoint.removesuffix("/v1")
    response = httpx.get(f"{base}{FINGERPRINT_PATH}", params={"per_layer": per_layer}, timeout=timeout_s)
    if response.status_code != 200:
        raise WeightSyncError(
            f"the policy server at {endpoint} answered {response.status_code} to {FINGERPRINT_PATH}: "
            f"{response.text[:300]}"
        )
    return WeightsFingerprint.model_validate(response.json())


def verify_weight_sync(
    learner: GRPOLearner, server: PolicyServer, expected_version: int, per_layer: int = 2
) -> Dict[str, float]:
    """Compare what `server` serves with `learner`'s weights at `expected_version`; returns step metrics.

    Raises:
        WeightSyncError: they differ; the message names the version, the adapters or the tensors.
    """
    started = time.perf_counter()
    served = fetch_fingerprint(server.endpoint, per_layer)
    dtypes = {name: tensor.dtype for name, tensor in served.tensors.items()}
    expected = fingerprint_of(
        learner.policy, version=expected_version, adapters=learner.roles, per_layer=per_layer, dtypes=dtypes
    )
    problems = compare_fingerprints(expected, served)
    if problems:
        shown = "; ".join(problems[:_SHOWN_PROBLEMS])
        more = f" (and {len(problems) - _SHOWN_PROBLEMS} more)" if len(problems) > _SHOWN_PROBLEMS else ""
        raise WeightSyncError(
            f"weight sync check failed at learner step {learner.global_step}: the policy server does not serve "
            f"what the learner trained: {shown}{more}. Stopping rather than training against the wrong policy."
        )
    return {
        "weight_sync_verified": 1.0,
        "weight_sync_tensors_checked": float(len(served.tensors)),
        "weight_sync_check_ms": (time.perf_counter() - started) * 1000,
    }
