"""Train the SQL agent with GRPO under an Agent-OS kernel that denies DROP/DELETE; violations fall.

Everything runs here, offline, on CPU: `Trainer.fit` with the shared-memory strategy, an in-memory store,
`AgentOSRunner` (every `database_query` call goes through the kernel's policy, refusals are recorded as
spans), `PolicyReward` (each refusal costs 1.0), and GRPO updating a small randomly initialised policy
served by the GRPO policy server. Before and after training, each question is answered greedily once.

    python contrib/recipes/agentos/train_sql_agent.py            # 30 steps (about 3 minutes on 2 cores)
    python contrib/recipes/agentos/train_sql_agent.py --quick    # 2 small steps, a smoke test

Outputs in `--output-dir` (default runs/agentos): shop.db (the database the tool ran on: still intact),
metrics.jsonl (GRPO metrics per step) and summary.json (the numbers printed at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_sql_agent import (  # noqa: E402
    AGENT_ID,
    HERE,
    QUESTIONS,
    SYSTEM_PROMPT,
    build_database,
    build_kernel,
    load_tasks,
    sql_agent,
    table_counts,
)

import agentlightning as agl  # noqa: E402
from agentlightning.contrib.agentos import violations_from_spans  # noqa: E402
from agentlightning.emitter import find_final_reward  # noqa: E402

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="GRPO on the Agent-OS governed SQL agent (policy: no DROP/DELETE).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/agentos"))
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--batch-size", type=int, default=4, help="questions per step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per question (the GRPO group)")
    parser.add_argument("--lr", type=float, default=3e-2, help="learning rate of the small policy")
    parser.add_argument("--epochs", type=int, default=4, help="optimisation passes over each step's rollouts")
    parser.add_argument("--penalty", type=float, default=1.0, help="reward subtracted per policy violation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 steps of 2 questions x 2 rollouts")
    return parser


def tiny_policy(seed: int) -> Tuple[Any, Any]:
    """A randomly initialised 2-layer Llama and a byte-level BPE tokenizer trained on the recipe's text."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [SYSTEM_PROMPT, QUESTIONS.read_text(encoding="utf-8"), "A B C D Answer: Question:"]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # type: ignore[assignment]
    raw.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    raw.train_from_iterator(
        corpus * 4,
        trainer=trainers.BpeTrainer(  # type: ignore[call-arg]
            vocab_size=512,
            special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=int(tokenizer.pad_token_id),  # type: ignore[arg-type]
        bos_token_id=int(tokenizer.bos_token_id),  # type: ignore[arg-type]
        eos_token_id=int(tokenizer.eos_token_id),  # type: ignore[arg-type]
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.eval()
    return model, tokenizer


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    if args.quick:
        args.steps, args.batch_size, args.group_size = 2, 2, 2
    return args


async def collect(store: Any, penalty: float) -> Dict[str, Any]:
    """Per GRPO step: train rollouts, violations, right answers; and the greedy evaluations (val)."""
    train: Dict[int, List[Tuple[int, float]]] = defaultdict(list)
    val: Dict[int, List[Tuple[int, float]]] = defaultdict(list)
    for rollout in await store.query_rollouts():
        spans = await store.query_spans(rollout.rollout_id)
        violations = len(violations_from_spans(spans))
        reward = find_final_reward(spans)
        task_reward = (reward if reward is not None else 0.0) + penalty * violations
        step = int((rollout.metadata or {}).get("grpo_step", (rollout.metadata or {}).get("step", -1)))
        (train if rollout.mode == "train" else val)[step].append((violations, task_reward))
    return {"train": dict(train), "val": dict(val)}


def rate(rows: Sequence[Tuple[int, float]], index: int) -> float:
    if not rows:
        return 0.0
    if index == 0:
        return sum(1 for violations, _ in rows if violations > 0) / len(rows)
    return sum(1 for _, task_reward in rows if task_reward >= 1.0) / len(rows)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    from agentlightning.algorithm.grpo import GRPO, GRPOConfig
    from agentlightning.contrib.reward.agentos import PolicyReward
    from agentlightning.contrib.runner.agentos import AgentOSRunner
    from agentlightning.store.memory import InMemoryLightningStore

    args = apply_quick(build_parser().parse_args(argv))
    # Agent-OS logs each refusal at ERROR and CRITICAL (SIGPOLICY -> SIGKILL); the recipe counts them from spans.
    logging.getLogger("agent_control_plane").setLevel(logging.CRITICAL + 1)
    began = time.perf_counter()
    output_dir: Path = args.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    db_path = build_database(output_dir / "shop.db")
    tasks = load_tasks(db_path)
    kernel = build_kernel(db_path)
    model, tokenizer = tiny_policy(args.seed)
    metrics_path = output_dir / "metrics.jsonl"
    metrics_path.unlink(missing_ok=True)
    config = GRPOConfig(
        group_size=args.group_size,
        batch_size=args.batch_size,
        total_steps=args.steps,
        temperature=1.0,
        val_temperature=0.0,
        max_new_tokens=2,
        learning_rate=args.lr,
        epochs_per_batch=args.epochs,
        micro_batch_size=32,
        rollout_timeout_s=300.0,
        seed=args.seed,
        metrics_path=str(metrics_path),
        device="cpu",
    )
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    runner = AgentOSRunner(
        kernel,
        fail_on_violation=False,
        emit_violations=True,
        agent_id=AGENT_ID,
        reward_fn=PolicyReward(kernel, penalty=args.penalty),
        poll_interval=0.05,
    )
    store = InMemoryLightningStore()
    trainer = agl.Trainer(algorithm=algorithm, runner=runner, store=store, strategy="shm", n_runners=1)
    print(
        f"Agent-OS recipe: {len(tasks)} questions, {args.steps} GRPO steps x {args.batch_size} questions x "
        f"{args.group_size} rollouts, penalty {args.penalty} per violation, output in {output_dir}/",
        flush=True,
    )
    trainer.fit(sql_agent, train_dataset=tasks, val_dataset=tasks)  # type: ignore[arg-type]

    stats = asyncio.run(collect(store, args.penalty))
    train_steps = sorted(stats["train"])
    val_steps = sorted(stats["val"])
    per_step = [
        {
            "step": step + 1,
            "rollouts": len(stats["train"][step]),
            "violation_rate": rate(stats["train"][step], 0),
            "right_answer_rate": rate(stats["train"][step], 1),
        }
        for step in train_steps
    ]
    before = stats["val"][val_steps[0]] if val_steps else []
    after = stats["val"][val_steps[-1]] if val_steps else []
    summary: Dict[str, Any] = {
        "steps": per_step,
        "greedy_before": {"violation_rate": rate(before, 0), "right_answer_rate": rate(before, 1)},
        "greedy_after": {"violation_rate": rate(after, 0), "right_answer_rate": rate(after, 1)},
        "database_after": table_counts(db_path),
        "kernel_policy_violations": kernel.metrics.policy_violations,
        "seconds": round(time.perf_counter() - began, 1),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "recipe": str(HERE),
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print("step  rollouts  violation rate  right answers")
    for row in per_step:
        print(
            f"{row['step']:>4}  {row['rollouts']:>8}  {row['violation_rate']:>14.2f}  {row['right_answer_rate']:>13.2f}"
        )
    print(
        f"greedy, all {len(tasks)} questions: violations {summary['greedy_before']['violation_rate']:.2f} -> "
        f"{summary['greedy_after']['violation_rate']:.2f}, right answers "
        f"{summary['greedy_before']['right_answer_rate']:.2f} -> {summary['greedy_after']['right_answer_rate']:.2f}"
    )
    print(f"database after training: {summary['database_after']} (nothing dropped or deleted)")
    print(f"done in {summary['seconds']} s")
    return summary


if __name__ == "__main__":
    main()
