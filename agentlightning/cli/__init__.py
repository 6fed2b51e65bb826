"""`agl`: the command-line front end. Each subcommand is a module with `main(argv) -> int`.

Adding a subcommand is one entry in `SUBCOMMANDS`; modules are imported only when their command runs,
so `agl --help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Optional

__all__ = ["SUBCOMMANDS", "main"]

# name -> (module with `main(argv) -> int`, one-line description)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "store": (
        "agentlightning.cli.store",
        "Serve a LightningStore over HTTP, with the dashboard at / (memory, SQLite or PostgreSQL backend).",
    ),
    "prometheus": ("agentlightning.cli.prometheus", "Serve Prometheus metrics gathered from many processes."),
    "vllm": ("agentlightning.cli.vllm", "Run vLLM's CLI (e.g. `serve`) checked to return token ids per request."),
    "serve": (
        "agentlightning.cli.serve",
        "Serve a Hugging Face causal LM as an OpenAI-compatible policy server (--model echo: no model).",
    ),
    "gateway": (
        "agentlightning.cli.gateway",
        "Serve rollout-scoped model URLs and the events API for harnessed agents.",
    ),
    "tinker": (
        "agentlightning.cli.tinker",
        "Serve the Tinker training API (tinker SDK, tinker-cookbook recipes) on local models with LoRA.",
    ),
    "export": ("agentlightning.cli.export", "Export a store's rollouts as a token-level parquet / HF dataset."),
    "import": ("agentlightning.cli.import_dataset", "Import a dataset written by `agl export` into a store."),
}


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        "usage: agl <command> [options]",
        "       agl help <command> | agl -V",
        "",
        "Agent Lightning command-line tools.",
        "",
        "commands:",
        *(f"  {name.ljust(width)}  {description}" for name, (_, description) in SUBCOMMANDS.items()),
        "",
        "options:",
        "  -h, --help     show this message",
        "  -V, --version  show the version",
        "",
        "Run `agl <command> --help` (or `agl help <command>`) for the options of a command.",
    ]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch `agl <command> ...` to the command's module; returns the exit code.

    A reader that stops early (`agl --help | head`) ends the command quietly instead of with a traceback.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return _dispatch(args)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        # Later writes (including the interpreter's final flush) go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def _dispatch(args: list[str]) -> int:
    if args[:1] == ["help"] and len(args) > 1:
        args = [args[1], "--help"]  # `agl help store` is `agl store --help`
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from agentlightning import __version__

        print(f"agl (agentlightning) {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in SUBCOMMANDS:
        print(f"agl: unknown command {command!r}; choose one of: {', '.join(SUBCOMMANDS)}\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
