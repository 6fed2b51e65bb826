"""Peak resident memory of one GRPO learner update in the shape of `make demo` (SmolLM2-135M on CPU).

Builds the demo's learner with the demo's exact `GRPOConfig` (`examples/grpo_calculator/train_calculator.py`
defaults) and runs one async update (scoring pass for the importance weights, then the optimizer steps) on
32 synthetic rows of the demo's shape: 4 groups x 8 rollouts, rows of about 270 tokens whose first 205 are
shared by all rows and 215 within a group, ~45 trained tokens each. A thread samples the RSS every 5 ms and
keeps each phase's peak (load, learner init, scoring, learner update; the process's RSS, torch's own pages
and the allocator's free lists together).

Run (one job at a time on a shared machine):
    PYTHONPATH=$PWD python benchmarks/learner_memory.py             # one update
    PYTHONPATH=$PWD python benchmarks/learner_memory.py --updates 2 # the second one too
    PYTHONPATH=$PWD python benchmarks/learner_memory.py --profile 25 # where the last update's time goes

Numbers depend on the machine and on what else runs on it; nothing here gates CI.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_gb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * _PAGE / 1e9


class PhasePeaks:
    """Samples the RSS in a thread and keeps the peak of each named phase."""

    def __init__(self) -> None:
        self.phase = "start"
        self.peaks: Dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.005)

    def sample(self) -> None:
        phase, rss = self.phase, _rss_gb()
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), rss)

    def set(self, phase: str) -> None:
        self.sample()
        self.phase = phase
        self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _demo_config() -> Any:
    path = Path(__file__).resolve().parents[1] / "examples" / "grpo_calculator" / "train_calculator.py"
    spec = importlib.util.spec_from_file_location("train_calculator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_calculator"] = module
    spec.loader.exec_module(module)
    args = module.apply_quick(module.build_parser().parse_args([]))
    return module.grpo_config(args, Path("/tmp/learner-memory-metrics.jsonl"))


def demo_samples(vocab: int, seed: int = 0) -> List[Any]:
    """32 rows of the demo's shape (see the module docstring), with sampler logprobs recorded."""
    from agentlightning.algorithm.grpo.batch import Sample

    rng = random.Random(seed)
    shared = [rng.randrange(vocab) for _ in range(205)]
    rows: List[Any] = []
    for group in range(4):
        prompt = shared + [rng.randrange(vocab) for _ in range(10)]
        for k in range(8):
            length = rng.randrange(45, 66)
            response = [rng.randrange(vocab) for _ in range(length)]
            mask = [1] * 20 + [0] * (length - 45) + [1] * 25
            rows.append(
                Sample(
                    prompt_ids=list(prompt),
                    response_ids=response,
                    advantage=rng.choice([-1.0, 1.0]) * rng.random(),
                    old_logprobs=[-rng.random() * 3 for _ in response],
                    rollout_id=f"ro-{group}-{k}",
                    group_id=f"task-{group}",
                    loss_mask=mask,
                    turns=2,
                    policy_version=0,
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description="Peak RSS of one GRPO learner update in the demo's shape.")
    parser.add_argument("--updates", type=int, default=1, help="learner updates to run")
    parser.add_argument("--sync", action="store_true", help="an on-policy update (no scoring pass)")
    parser.add_argument("--micro-batch-size", type=int, default=0, help="rows per forward/backward (0: the demo's)")
    parser.add_argument(
        "--backward-chunk-tokens", type=int, default=-1, help="GRPOConfig.backward_chunk_tokens (-1: the demo's)"
    )
    parser.add_argument("--freeze-embeddings", action="store_true", help="GRPOConfig.freeze_embeddings")
    parser.add_argument("--profile", type=int, default=0, help="torch.profiler's top N ops of the last update")
    args = parser.parse_args()

    peaks = PhasePeaks()
    peaks.set("load")
    import torch

    from agentlightning.algorithm.grpo.learner import GRPOLearner
    from agentlightning.serving.models import load_causal_lm, prepare_tokenizer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    config = _demo_config()
    if args.micro_batch_size:
        micro = args.micro_batch_size
        accumulation = max(1, -(-32 // micro) // config.max_updates_per_batch)
        config = replace(config, micro_batch_size=micro, gradient_accumulation_steps=accumulation)
    if args.backward_chunk_tokens >= 0:
        config = replace(config, backward_chunk_tokens=args.backward_chunk_tokens)
    if args.freeze_embeddings:
        config = replace(config, freeze_embeddings=True)
    model, tokenizer = load_causal_lm("smollm2", device="cpu")
    prepare_tokenizer(tokenizer)
    peaks.set("learner init")
    learner = GRPOLearner(model, tokenizer, config)
    samples = demo_samples(int(model.config.vocab_size))
    times: List[float] = []
    for update in range(args.updates):
        peaks.set(f"update {update + 1}")
        started = time.perf_counter()
        thread_phase = threading.Event()

        def watch(done: threading.Event = thread_phase, prefix: str = f"update {update + 1}") -> None:
            while not done.is_set():
                phase = learner.progress.phase
                if phase:
                    peaks.set(f"{prefix}: {phase}")
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        if args.profile and update == args.updates - 1:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                metrics = learner.step(samples, off_policy=not args.sync)
            print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile))
        else:
            metrics = learner.step(samples, off_policy=not args.sync)
        thread_phase.set()
        watcher.join()
        times.append(time.perf_counter() - started)
        peaks.set(f"after update {update + 1}")
        print(
            f"update {update + 1}: {times[-1]:.1f} s, loss {metrics['loss']:.6f}, grad_norm {metrics['grad_norm']:.6f}"
        )
    peaks.stop()
    print("\n| phase | peak RSS (GB) |\n| --- | --- |")
    for phase, value in peaks.peaks.items():
        print(f"| {phase} | {value:.2f} |")
    print(f"\nru_maxrss: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    print(
        f"config: micro_batch_size={config.micro_batch_size}, accumulation={config.gradient_accumulation_steps}, "
        f"max_updates={config.max_updates_per_batch}, kl_coef={config.kl_coef}, "
        f"backward_chunk_tokens={config.backward_chunk_tokens}, freeze_embeddings={config.freeze_embeddings}"
    )


if __name__ == "__main__":
    main()
