"""`agl gateway`: serve the harness gateway (rollout-scoped model URLs + events API) as its own service.

Agents on other machines or in containers call the model and report rewards through it; everything lands
in the chosen store, so with a durable backend (or a store server in front of one) a gateway restart
loses nothing that was acknowledged. Keys handed to agents derive from `--secret`: keep it to keep them
valid across restarts, and give it to `ProcessAgent(gateway=URL, gateway_secret=...)`.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from typing import Any, Optional

from agentlightning.web.body_limit import DEFAULT_MAX_REQUEST_SIZE

from ._logging import LOG_LEVELS, run_service, setup_cli_logging
from .store import BACKENDS, DEFAULT_SQLITE_PATH, build_store, byte_size

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 4750


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl gateway",
        description="Serve rollout-scoped OpenAI endpoints and the events API for harnessed agents over a store.",
        epilog=(
            "examples:\n"
            "  agl gateway --store-url http://127.0.0.1:4747 --upstream http://127.0.0.1:8000/v1\n"
            "  agl gateway --upstream http://127.0.0.1:8000/v1 --model-name Qwen/Qwen2.5-1.5B-Instruct  # v1.0 agents\n"
            "  agl gateway --backend sqlite --path runs.db --secret $AGL_GATEWAY_SECRET"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = free)")
    parser.add_argument("--store-url", help="use the store served by `agl store` at this URL (any backend)")
    parser.add_argument("--store-token", default=os.environ.get("AGL_STORE_TOKEN"), help="bearer token of --store-url")
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite", help="store backend without --store-url")
    parser.add_argument("--path", default=DEFAULT_SQLITE_PATH, help="SQLite file for --backend sqlite")
    parser.add_argument(
        "--dsn", default=os.environ.get("AGL_POSTGRES_DSN"), help="PostgreSQL DSN for --backend postgres"
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL",
        help="OpenAI-compatible base URL of a model replica (repeatable; rollouts are pinned to one). "
        "None: each rollout uses its LLM resource's endpoint",
    )
    parser.add_argument("--upstream-api-key", help="bearer key sent to the upstreams")
    parser.add_argument(
        "--model-name",
        help="send every call as this model, whatever the agent names (v1.0 agents send 'auto'); also the name "
        "endpoints registered at /api/models are looked up under",
    )
    parser.add_argument("--llm-resource", help="name of the LLM resource to use when no --upstream is given")
    parser.add_argument("--train-temperature", type=float, default=1.0, help="temperature of train calls (1.0)")
    parser.add_argument("--val-temperature", type=float, default=0.7, help="temperature of val calls (0.7)")
    parser.add_argument("--num-retries", type=int, default=3, help="retries on 408/409/429/5xx and errors (3)")
    parser.add_argument(
        "--secret",
        default=os.environ.get("AGL_GATEWAY_SECRET"),
        help="secret attempt keys derive from (default $AGL_GATEWAY_SECRET; else a random one, printed)",
    )
    parser.add_argument(
        "--max-body-size",
        type=byte_size,
        default=DEFAULT_MAX_REQUEST_SIZE,
        metavar="BYTES",
        help="largest request body accepted, e.g. 32MB (default); larger ones get HTTP 413",
    )
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("AGL_GATEWAY_ADMIN_KEY"),
        help="key of /proxy/pause|resume|state, /api/models and /api/rollouts (default $AGL_GATEWAY_ADMIN_KEY, "
        "else the secret)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="INFO", help="log verbosity (default INFO)")
    return parser


def _open_store(args: argparse.Namespace) -> Any:
    if args.store_url:
        from agentlightning.store_http.client import LightningStoreClient

        return LightningStoreClient(args.store_url, auth_token=args.store_token)
    return build_store(args)


async def _serve(args: argparse.Namespace) -> None:
    from agentlightning.gateway import Gateway, GatewayConfig
    from agentlightning.gateway.keys import new_secret

    config = GatewayConfig(
        upstreams=tuple(args.upstream),
        upstream_api_key=args.upstream_api_key,
        model_name=args.model_name,
        llm_resource=args.llm_resource,
        train_temperature=args.train_temperature,
        val_temperature=args.val_temperature,
        num_retries=args.num_retries,
        max_body_size=args.max_body_size,
    )
    secret = args.secret
    if not secret:
        secret = new_secret()
        print(f"agl gateway: no --secret given; using AGL_GATEWAY_SECRET={secret}", flush=True)
    store = _open_store(args)
    try:
        gateway = Gateway(
            store,
            config,
            secret=secret,
            admin_key=args.admin_key,
            host=args.host,
            port=args.port,
            launch_mode="asyncio",
        )
        await gateway.start()
        print(f"agl gateway serving at {gateway.endpoint} (store: {type(store).__name__})", flush=True)
        await gateway.run_forever()
    finally:
        await store.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    setup_cli_logging(args.log_level)
    return run_service("agl gateway", _serve(args))
