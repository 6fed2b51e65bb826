"""A run that sends its rollouts to a store server already running (`agl store`), so its dashboard shows them.

`Trainer(store="http://127.0.0.1:4747")`, or `AGL_STORE_URL=http://127.0.0.1:4747` with no `store`, makes
the trainer use a `LightningStoreClient`: the algorithm and every runner process talk to that server,
and no store server of the run's own is started.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Optional

from agentlightning.env_var import LightningEnvVar, resolve_str_env_var
from agentlightning.execution.errors import RunError

if TYPE_CHECKING:
    from agentlightning.store_http.client import LightningStoreClient

__all__ = ["STORE_CONNECT_TIMEOUT_SECONDS", "is_store_url", "store_url_from_env", "wait_until_store_answers"]

logger = logging.getLogger(__name__)

STORE_CONNECT_TIMEOUT_SECONDS = 10.0
"""How long `fit`/`dev` wait for a store given by URL to answer its health check before giving up."""

_PROBE_INTERVAL_SECONDS = 0.25


def is_store_url(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def store_url_from_env() -> Optional[str]:
    """`AGL_STORE_URL`, checked to be an http(s) URL."""
    url = resolve_str_env_var(LightningEnvVar.AGL_STORE_URL)
    if url is not None and not is_store_url(url):
        raise ValueError(f"AGL_STORE_URL={url!r} is not an http(s) URL; set it like http://127.0.0.1:4747")
    return url


def _probe(url: str, token: Optional[str]) -> Optional[str]:
    """None when the health check answers 200, else why not."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}; is it an agentlightning store?"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return str(reason)


def wait_until_store_answers(client: LightningStoreClient, source: str, timeout: Optional[float] = None) -> None:
    """Return once the store server behind `client` answers; raise `RunError` after `timeout` seconds
    (default `STORE_CONNECT_TIMEOUT_SECONDS`).

    `source` says where the URL came from (`AGL_STORE_URL`, `store=...`), for the error message.
    """
    timeout = STORE_CONNECT_TIMEOUT_SECONDS if timeout is None else timeout
    url = f"{client.server_address}/health"
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        reason = _probe(url, client.auth_token)
        if reason is None:
            return
        if time.monotonic() >= deadline or reason.startswith("HTTP"):
            raise RunError(
                f"no agentlightning store answered at {url} within {timeout:g} s ({reason}; the URL comes from "
                f"{source}). Start one with `agl store` (add --port to choose its port), or drop {source} to "
                "run with a store of the run's own"
            )
        if not announced:
            logger.warning("waiting up to %g s for the store at %s (%s)", timeout, client.server_root, source)
            announced = True
        time.sleep(_PROBE_INTERVAL_SECONDS)
