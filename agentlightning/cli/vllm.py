"""`agl vllm`: run vLLM's own CLI (usually `serve`) with every argument forwarded untouched.

vLLM >= 0.10.2 returns prompt and response token ids per request (`return_token_ids: true`, which the
LLM proxy adds to every call), so no server flag or patch is needed; `agl vllm serve` checks that the
installed vLLM is recent enough and then replaces itself with `python -m vllm.entrypoints.cli.main ...`.
`--dry-run` prints that command instead of running it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Callable, Optional

__all__ = ["MIN_TOKEN_IDS_VERSION", "build_command", "installed_vllm_version", "parse_version", "main"]

MIN_TOKEN_IDS_VERSION = (0, 10, 2)
"""First vLLM release whose OpenAI server honours the request field `return_token_ids`."""

VLLM_ENTRYPOINT = "vllm.entrypoints.cli.main"
INSTALL_HINT = "pip install 'agentlightning[verl]' (or pip install 'vllm>=0.10.2'), on a machine with a GPU"

USAGE = f"""usage: agl vllm [--dry-run] <vllm command> [vllm arguments...]

Run vLLM's CLI with all arguments forwarded, e.g.

  agl vllm serve Qwen/Qwen2.5-0.5B-Instruct --port 8000 --gpu-memory-utilization 0.8

vLLM >= {".".join(map(str, MIN_TOKEN_IDS_VERSION))} returns prompt/response token ids when a request sets
`return_token_ids: true` (the LLM proxy does), so nothing is added to the command. `agl vllm serve`
refuses older vLLM versions, which cannot. Options of agl itself:

  --dry-run    print the vLLM command instead of running it
  -h, --help   this help (`agl vllm serve --help` shows vLLM's own)
"""


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric release parts: '0.10.2rc1' -> (0, 10, 2), '0.11.0.dev3+gabc' -> (0, 11, 0)."""
    parts: list[int] = []
    for piece in text.split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):
            break
    if not parts:
        raise ValueError(f"cannot read a version number from {text!r}")
    return tuple(parts)


def installed_vllm_version() -> Optional[str]:
    """The installed vLLM version without importing it (importing vLLM loads torch), or None."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pass
    if importlib.util.find_spec("vllm") is None:
        return None
    import vllm  # a source checkout without distribution metadata

    return str(getattr(vllm, "__version__", "0"))


def build_command(vllm_args: Sequence[str]) -> list[str]:
    """The command that runs vLLM's CLI with `vllm_args`, using this Python interpreter."""
    return [sys.executable, "-m", VLLM_ENTRYPOINT, *vllm_args]


def _exec(command: list[str]) -> None:
    """Replace this process (signals and exit code then belong to vLLM)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def main(argv: Optional[Sequence[str]] = None, *, run: Callable[[list[str]], None] = _exec) -> int:
    """Entry point of `agl vllm`; `run` executes the command (replaces the process by default)."""
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in args
    args = [arg for arg in args if arg != "--dry-run"]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command = build_command(args)
    version = installed_vllm_version()
    if dry_run:
        print(shlex.join(command))
        if version is None:
            print(f"agl vllm: note: vLLM is not installed here; {INSTALL_HINT}", file=sys.stderr)
        return 0
    if version is None:
        print(f"agl vllm: vLLM is not installed; {INSTALL_HINT}", file=sys.stderr)
        return 1
    if args[0] == "serve":
        try:
            too_old = parse_version(version) < MIN_TOKEN_IDS_VERSION
        except ValueError:
            too_old = False  # an unreadable (development) version: let vLLM decide
        if too_old:
            minimum = ".".join(map(str, MIN_TOKEN_IDS_VERSION))
            print(
                f"agl vllm: vLLM {version} cannot return token ids per request (needs >= {minimum}), which "
                f"training on token ids relies on; upgrade with pip install 'vllm>={minimum}', or run "
                f"`vllm serve` directly if token ids are not needed",
                file=sys.stderr,
            )
            return 1
    run(command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
