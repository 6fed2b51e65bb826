"""Serve a model with vLLM so that every response carries token ids, and check it with one request.

RL on an agent's LLM calls needs the exact token ids the model saw and produced. vLLM >= 0.10.2 returns
them per request (`return_token_ids: true`); `agl vllm serve` checks the installed version and runs
vLLM's own CLI. This script builds that command from a few options, starts it, waits until the server
answers, sends one chat request asking for token ids and prints them.

Run (from the repository root; vLLM needs a GPU and `pip install 'vllm>=0.10.2'`):

    python examples/minimal/vllm_server.py --model Qwen/Qwen2.5-0.5B-Instruct --port 8000
    python examples/minimal/vllm_server.py --model Qwen/Qwen2.5-0.5B-Instruct --dry-run   # no vLLM needed

What to expect: with `--dry-run`, the vLLM command line (`... -m vllm.entrypoints.cli.main serve
Qwen/Qwen2.5-0.5B-Instruct --port 8000 --gpu-memory-utilization 0.8 --max-model-len 4096 ...`) and, when
vLLM is not installed here, a note saying how to install it. Without `--dry-run` and without vLLM:
"vLLM is not installed" and exit status 1. With vLLM: its startup log, then "prompt token ids: [...]"
and "response token ids: [...]" from one request, and the server keeps running until Ctrl+C (or exits
after the check with `--check-only`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Optional

import httpx

from agentlightning.cli.vllm import INSTALL_HINT, build_command, installed_vllm_version

STARTUP_TIMEOUT_S = 900.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a hub id or a local folder, e.g. Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.8, help="share of GPU memory (0-1]")
    parser.add_argument("--max-model-len", type=int, default=4096, help="context length (default 4096)")
    parser.add_argument("--served-model-name", default=None, help="model name clients use (default: --model)")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("--check-only", action="store_true", help="stop the server after the token-id check")
    return parser


def vllm_arguments(args: argparse.Namespace) -> list[str]:
    """The arguments of `vllm serve` for these options (checked here, so mistakes fail before vLLM loads)."""
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.max_model_len < 16:
        raise ValueError(f"--max-model-len must be >= 16, got {args.max_model_len}")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    arguments = ["serve", args.model, "--host", args.host, "--port", str(args.port)]
    arguments += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    arguments += ["--max-model-len", str(args.max_model_len)]
    if args.served_model_name:
        arguments += ["--served-model-name", args.served_model_name]
    return arguments


def check_token_ids(base_url: str, model: str) -> tuple[list[int], list[int]]:
    """Send one chat request with `return_token_ids` and return (prompt ids, response ids)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 8,
        "return_token_ids": True,
    }
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120).json()
    prompt_ids, response_ids = reply.get("prompt_token_ids"), reply["choices"][0].get("token_ids")
    if not prompt_ids or not response_ids:
        raise RuntimeError(f"the server returned no token ids; is vLLM older than 0.10.2? reply: {reply}")
    return prompt_ids, response_ids


def wait_until_healthy(process: subprocess.Popen[bytes], url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with status {process.returncode} before answering")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vLLM did not answer {url} within {timeout_s:.0f} s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        command = build_command(vllm_arguments(args))
    except ValueError as exc:
        parser.error(str(exc))
    version = installed_vllm_version()
    if args.dry_run:
        print(" ".join(command))
        if version is None:
            print(f"note: vLLM is not installed here; {INSTALL_HINT}", file=sys.stderr)
        return 0
    if version is None:
        print(f"vLLM is not installed; {INSTALL_HINT}", file=sys.stderr)
        return 1
    base_url = f"http://{args.host}:{args.port}/v1"
    process = subprocess.Popen(command)
    try:
        wait_until_healthy(process, f"http://{args.host}:{args.port}/health", STARTUP_TIMEOUT_S)
        prompt_ids, response_ids = check_token_ids(base_url, args.served_model_name or args.model)
        print(f"prompt token ids: {prompt_ids}\nresponse token ids: {response_ids}")
        if not args.check_only:
            print(f"vLLM {version} serving {args.model} at {base_url} with token ids (Ctrl+C to stop)")
            process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
