"""The one-device reference card: engine decode, TTFT, HF `generate`, a GRPO update, weight sync, a step's split.

One command, one run, per model shape (random init; throughput does not depend on the weights):
- engine decode tokens/s at each concurrency (`--concurrency`, default 1,8,32,64), and TTFT p50/p99 under
  Poisson arrivals (`engine_bench.ours_poisson`),
- HF `generate` at the same concurrencies: eager, and static cache + `torch.compile` (CUDA only),
- a GRPO update (`GRPOLearner.step` on `--learn-rows` rows of prompt + response tokens): tokens/s and MFU
  (6 x parameters x tokens per second over the card's peak, `--peak-tflops`; CUDA bf16 default 989 for
  an H100/H200 dense, unset on CPU),
- weight sync ms per update: full (`update_weights` from the learner's model) and LoRA (adapter weights),
- a GRPO step's wall split: generate (the engine, `--group` completions per prompt) / score / learn / sync,
  and rollouts/s end to end.

On CUDA the models run in bfloat16; on CPU in float32 (`--quick`: smaller settings, ~10 minutes on two
cores). Run:

    python benchmarks/gpu_card.py --json card.json               # CUDA: the GPU card
    python benchmarks/gpu_card.py --quick --json cpu-card.json   # CPU card
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from engine_bench import build_model, hf_generate, make_engine, ours_closed, ours_poisson  # noqa: E402


def device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "")
    return f"{model or platform.processor() or 'CPU'} ({os.cpu_count()} cores)"


def _cpuinfo() -> List[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return handle.readlines()
    except OSError:
        return []


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_rows(model: Any, tokenizer: Any, args: argparse.Namespace, device: Any) -> Dict[str, Any]:
    """Ours at each concurrency, Poisson TTFT, HF eager (and static+compile on CUDA)."""
    import torch

    from agentlightning.serving.sampling import SamplingParams

    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, ignore_eos=True)
    count = max(args.concurrency + [args.poisson_requests])
    prompts = torch.randint(2, int(model.config.vocab_size), (count, args.prompt_tokens)).tolist()
    rows: List[Dict[str, Any]] = []
    engine = make_engine(
        model, tokenizer, max(args.concurrency), None, fuse=True
    )  # as GRPO (sync, CPU) and agl serve serve
    try:
        for c in args.concurrency:
            row = asyncio.run(ours_closed(engine, prompts, params, c))
            rows.append({"system": "ours", "c": c, "tokens_per_s": row.tokens_per_s, "note": row.note})
        base = next((r["tokens_per_s"] for r in rows if r["c"] == 8), rows[-1]["tokens_per_s"])
        rate = max(0.05, 0.5 * base / args.new_tokens)
        poisson = asyncio.run(ours_poisson(engine, prompts[: args.poisson_requests], params, rate))
    finally:
        engine.close()
    for static in [False] + ([True] if device.type == "cuda" else []):
        for c in args.hf_concurrency:
            try:
                row = hf_generate(model, prompts[:c], args.new_tokens, static=static)
            except Exception as exc:  # a baseline that cannot run here must not lose the card
                print(f"  HF generate (static={static}) at c={c} failed: {type(exc).__name__}: {exc}")
                continue
            rows.append({"system": row.system, "c": c, "tokens_per_s": row.tokens_per_s, "note": ""})
    return {
        "decode": rows,
        "poisson": {
            "requests": args.poisson_requests,
            "rate_per_s": rate,
            "tokens_per_s": poisson.tokens_per_s,
            "ttft_p50_ms": poisson.ttft_p50_ms,
            "ttft_p99_ms": poisson.ttft_p99_ms,
        },
    }


def _samples(args: argparse.Namespace, vocab: int, rows: int) -> List[Any]:
    import random

    from agentlightning.algorithm.grpo.batch import Sample

    rng = random.Random(0)
    return [
        Sample(
            prompt_ids=[rng.randrange(2, vocab) for _ in range(args.prompt_tokens)],
            response_ids=[rng.randrange(2, vocab) for _ in range(args.new_tokens)],
            advantage=1.0 if i % 2 else -1.0,
            group_id=i // 2,
        )
        for i in range(rows)
    ]


def learner_row(model: Any, tokenizer: Any, args: argparse.Namespace, device: Any, lora: bool) -> Dict[str, Any]:
    """Tokens/s and MFU of `GRPOLearner.step`, and the weight sync after it (full or LoRA)."""
    from agentlightning.algorithm.grpo.config import GRPOConfig
    from agentlightning.algorithm.grpo.learner import GRPOLearner
    from agentlightning.serving.engine import PolicyEngine

    config = GRPOConfig(micro_batch_size=args.micro_batch, lora_rank=8 if lora else 0, device=str(device))
    learner = GRPOLearner(copy.deepcopy(model).train(), tokenizer, config)
    samples = _samples(args, int(model.config.vocab_size), args.learn_rows)
    learner.step(samples[: args.micro_batch])  # warm-up (allocations, kernels)
    _sync(device)
    started = time.perf_counter()
    learner.step(samples)
    _sync(device)
    learn_s = time.perf_counter() - started
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    parameters = sum(p.numel() for p in model.parameters())
    served = copy.deepcopy(learner.policy).eval()
    adapters = list(getattr(served, "peft_config", {}) or {}) if lora else []
    engine = PolicyEngine(served, tokenizer, max_batch_size=8, adapters=adapters)
    engine.start()
    try:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            engine.update_weights(learner.policy)
            _sync(device)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        engine.close()
    flops = 6.0 * parameters * tokens / learn_s
    return {
        "kind": "LoRA r=8" if lora else "full",
        "rows": len(samples),
        "tokens": tokens,
        "learn_s": learn_s,
        "tokens_per_s": tokens / learn_s,
        "mfu": flops / (args.peak_tflops * 1e12) if args.peak_tflops else None,
        "weight_sync_ms": statistics.median(times),
    }


def step_split(model: Any, tokenizer: Any, args: argparse.Namespace, device: Any) -> Dict[str, Any]:
    """One GRPO step on a shared model: generate (`--group` per prompt), score, learn, sync."""
    from agentlightning.algorithm.grpo.batch import Sample
    from agentlightning.algorithm.grpo.config import GRPOConfig
    from agentlightning.algorithm.grpo.learner import GRPOLearner
    from agentlightning.serving.sampling import SamplingParams

    policy = copy.deepcopy(model)
    learner = GRPOLearner(policy, tokenizer, GRPOConfig(micro_batch_size=args.micro_batch, device=str(device)))
    engine = make_engine(learner.policy, tokenizer, max(8, args.group * args.prompts), None, fuse=True)
    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, ignore_eos=True)
    prompts = _samples(args, int(model.config.vocab_size), args.prompts)
    try:
        started = time.perf_counter()

        async def generate() -> List[Any]:
            return await asyncio.gather(*[engine.generate(s.prompt_ids, params, n=args.group) for s in prompts])

        results = asyncio.run(generate())
        generated = time.perf_counter()
        samples = []
        for prompt, ends in zip(prompts, results, strict=True):
            rewards = [float(len(set(e.token_ids)) % 2) for e in ends]  # a stand-in reward: cheap, not constant
            mean = statistics.fmean(rewards)
            samples += [
                Sample(prompt.prompt_ids, e.token_ids, r - mean + 0.5, e.logprobs)
                for e, r in zip(ends, rewards, strict=True)
            ]
        scored = time.perf_counter()
        with engine.exclusive(weights_change=True):  # as GRPO's sync update: the prepacked copies dropped
            learner.step(samples)
        _sync(device)
        learned = time.perf_counter()
        engine.update_weights(learner.policy)
        synced = time.perf_counter()
    finally:
        engine.close()
    wall = synced - started
    return {
        "rollouts": len(samples),
        "generate_s": generated - started,
        "score_s": scored - generated,
        "learn_s": learned - scored,
        "sync_s": synced - learned,
        "wall_s": wall,
        "rollouts_per_s": len(samples) / wall,
    }


def markdown(card: Dict[str, Any]) -> str:
    lines = [f"### {card['device']}, {card['dtype']}", ""]
    for shape in card["shapes"]:
        name, decode = shape["model"], shape["decode"]
        cs = sorted({r["c"] for r in decode})
        lines += [f"**{name}** ({card['prompt_tokens']}-token prompts, {card['new_tokens']} new tokens)", ""]
        lines += ["| decode tokens/s | " + " | ".join(f"c={c}" for c in cs) + " |", "|---" * (len(cs) + 1) + "|"]
        for system in dict.fromkeys(r["system"] for r in decode):
            cells = {r["c"]: f"{r['tokens_per_s']:,.1f}" for r in decode if r["system"] == system}
            lines.append(f"| {system} | " + " | ".join(cells.get(c, "") for c in cs) + " |")
        p = shape["poisson"]
        lines += [
            "",
            f"Poisson arrivals ({p['requests']} requests at {p['rate_per_s']:.2f}/s): {p['tokens_per_s']:,.1f} "
            f"tokens/s, TTFT p50 {p['ttft_p50_ms']:.0f} ms, p99 {p['ttft_p99_ms']:.0f} ms.",
            "",
            "| GRPO update | rows | tokens/s | MFU | weight sync ms |",
            "|---|---|---|---|---|",
        ]
        for r in shape["learner"]:
            mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
            lines.append(
                f"| {r['kind']} | {r['rows']} | {r['tokens_per_s']:,.0f} | {mfu} | {r['weight_sync_ms']:.1f} |"
            )
        s = shape["step"]
        lines += [
            "",
            f"GRPO step ({s['rollouts']} rollouts): generate {s['generate_s']:.1f} s, score {s['score_s']:.2f} s, "
            f"learn {s['learn_s']:.1f} s, sync {s['sync_s']:.2f} s; wall {s['wall_s']:.1f} s, "
            f"{s['rollouts_per_s']:.2f} rollouts/s.",
            "",
        ]
    return "\n".join(lines)


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="smollm2-shape,qwen0.5b-shape")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quick", action="store_true", help="CPU-sized settings (about 10 minutes on 2 cores)")
    parser.add_argument("--concurrency", type=_ints, default=None)
    parser.add_argument("--hf-concurrency", type=_ints, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=31)
    parser.add_argument("--new-tokens", type=int, default=None)
    parser.add_argument("--poisson-requests", type=int, default=None)
    parser.add_argument("--learn-rows", type=int, default=None)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=None, help="prompts of the GRPO step")
    parser.add_argument("--group", type=int, default=None, help="completions per prompt in the GRPO step")
    parser.add_argument("--peak-tflops", type=float, default=None, help="for MFU (CUDA default 989: H100/H200)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    quick = args.quick
    args.concurrency = args.concurrency or ([1, 8] if quick else [1, 8, 32, 64])
    args.hf_concurrency = args.hf_concurrency if args.hf_concurrency is not None else args.concurrency
    args.new_tokens = args.new_tokens or (32 if quick else 128)
    args.poisson_requests = args.poisson_requests or (8 if quick else 64)
    args.learn_rows = args.learn_rows or (8 if quick else 64)
    args.prompts = args.prompts or (2 if quick else 8)
    args.group = args.group or (4 if quick else 8)
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    import torch

    from agentlightning.serving.models import resolve_device

    args = parse(argv)
    device = resolve_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.peak_tflops is None and device.type == "cuda":
        args.peak_tflops = 989.0
    card: Dict[str, Any] = {
        "device": device_name(device),
        "dtype": str(dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "shapes": [],
    }
    for name in [m for m in args.models.split(",") if m]:
        model, tokenizer = build_model(name, device, dtype)
        print(f"gpu_card: {name} on {card['device']}, {card['dtype']}", flush=True)
        shape: Dict[str, Any] = {"model": name, **decode_rows(model, tokenizer, args, device)}
        shape["learner"] = [learner_row(model, tokenizer, args, device, lora) for lora in (False, True)]
        shape["step"] = step_split(model, tokenizer, args, device)
        card["shapes"].append(shape)
        del model
    table = markdown(card)
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(card, handle, indent=2)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(table + "\n")
    return card


if __name__ == "__main__":
    main()
