"""When the HTTP client sends a failed request again: a time budget spent in jittered exponential backoff.

The default budget (60 s) outlasts a store server restart, so runners and algorithms carry on across
it; a server still down when the budget is spent is reported with an error naming it.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Optional

__all__ = ["RETRY_BUDGET_ENV", "DEFAULT_RETRY_BUDGET_SECONDS", "RetryBackoff", "retry_budget_from_env"]

RETRY_BUDGET_ENV = "AGL_STORE_RETRY_BUDGET"
DEFAULT_RETRY_BUDGET_SECONDS = 60.0


def retry_budget_from_env() -> float:
    raw = os.environ.get(RETRY_BUDGET_ENV)
    if not raw:
        return DEFAULT_RETRY_BUDGET_SECONDS
    try:
        budget = float(raw)
    except ValueError:
        raise ValueError(f"{RETRY_BUDGET_ENV} must be a number of seconds, got {raw!r}") from None
    if not budget >= 0:
        raise ValueError(f"{RETRY_BUDGET_ENV} must be >= 0 seconds, got {raw!r}")
    return budget


@dataclass(frozen=True)
class RetryBackoff:
    """Delays `initial * multiplier**n`, capped at `maximum`, each scaled by a random factor in [1 - jitter, 1].

    The jitter keeps many runners that lost the same server from coming back in lockstep.
    """

    budget: float = DEFAULT_RETRY_BUDGET_SECONDS
    initial: float = 0.2
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def delay(self, retry: int, elapsed: float) -> Optional[float]:
        """Seconds to wait before retry number `retry` (0-based), or None when the budget is spent."""
        remaining = self.budget - elapsed
        if remaining <= 0:
            return None
        nominal = min(self.maximum, self.initial * self.multiplier**retry)
        return min(remaining, nominal * (1.0 - self.jitter * random.random()))
