"""Where the HTTP side lives: `agentlightning.store_http`, with the v0.3 paths under `agentlightning.store` kept."""

from __future__ import annotations

import subprocess
import sys

import agentlightning.store as store_package
import agentlightning.store_http as http_package


def test_v03_paths_re_export_the_same_classes() -> None:
    from agentlightning.store.client import LightningStoreClient as OldClient
    from agentlightning.store.server import LightningStoreServer as OldServer

    assert OldServer is http_package.LightningStoreServer is store_package.LightningStoreServer
    assert OldClient is http_package.LightningStoreClient is store_package.LightningStoreClient


def test_every_store_export_resolves() -> None:
    for name in store_package.__all__:
        assert getattr(store_package, name) is not None, name
    for name in http_package.__all__:
        assert getattr(http_package, name) is not None, name


def test_importing_the_store_loads_no_http_stack() -> None:
    code = (
        "import sys, agentlightning, agentlightning.store; "
        "loaded = [m for m in ('fastapi', 'aiohttp', 'uvicorn', 'agentlightning.store_http.server') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
