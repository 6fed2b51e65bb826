"""Train on a Ray cluster: `agl store` (PostgreSQL) on the head, runners as Ray actors, GRPO or VERL.

The recipe (docs/multi-node.md) starts, on the head node, PostgreSQL, `agl store --backend postgres`
and `ray start --head`; each worker node joins with `ray start --address HEAD:6379`. This script then runs
on the head: the algorithm here, `--n-runners` runner actors spread over the worker nodes, all of them
talking to the same store. The agent asks the policy to greet and is rewarded for saying "hello".

Run (on the head node):

    export AGL_STORE_TOKEN=...   # the token `agl store --auth-token` was started with
    python examples/multinode/train_ray.py --store-url http://HEAD_IP:4747 --ray-address auto \
        --algorithm grpo --model HuggingFaceTB/SmolLM2-135M-Instruct --policy-host HEAD_IP --n-runners 8
    python examples/multinode/train_ray.py --store-url http://HEAD_IP:4747 --ray-address auto \
        --algorithm verl --model Qwen/Qwen2.5-0.5B-Instruct --n-gpus-per-node 8 --nnodes 2

What to expect: GRPO prints one line of metrics per step and writes `<checkpoint-dir>/metrics.jsonl`; the
store keeps every rollout and span (open the dashboard of `agl store` to watch them). A lost worker node
does not stop training: Ray restarts its runner actors elsewhere and the rollout they were running is
retried once (the rollouts allow one retry of a timed-out or unresponsive attempt).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Optional

from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.types import LLM

GREETINGS = [{"question": f"Greet visitor number {i} in one word."} for i in range(16)]


@agl.rollout
async def greeting_agent(task: dict[str, Any], llm: LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    reply = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": task["question"]}],
        **llm.sampling_parameters,
    )
    return float("hello" in (reply.choices[0].message.content or "").lower())


def make_algorithm(args: argparse.Namespace) -> Any:
    if args.algorithm == "grpo":
        from agentlightning.algorithm.grpo import GRPO, GRPOConfig

        config = GRPOConfig(
            group_size=args.group_size,
            batch_size=args.batch_size,
            total_steps=args.steps,
            max_new_tokens=args.max_new_tokens,
            checkpoint_dir=args.checkpoint_dir,
            device=args.device,
        )
        return GRPO(config, model=args.model, server_host=args.policy_host)
    return agl.VERL(
        {
            "algorithm": {"adv_estimator": "grpo"},
            "data": {"train_batch_size": args.batch_size, "max_prompt_length": 256, "max_response_length": 64},
            "actor_rollout_ref": {
                "model": {"path": args.model},
                "rollout": {"n": args.group_size, "name": "vllm", "gpu_memory_utilization": 0.6},
                "actor": {"ppo_mini_batch_size": args.batch_size},
            },
            "trainer": {
                "n_gpus_per_node": args.n_gpus_per_node,
                "nnodes": args.nnodes,
                "total_training_steps": args.steps,
                "val_before_train": False,
                "logger": ["console"],
            },
            "agentlightning": {"max_attempts": 2},
        }
    )


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store-url", required=True, help="the `agl store` on the head, e.g. http://10.0.0.1:4747")
    parser.add_argument("--ray-address", default="auto", help="Ray cluster to join (default: auto)")
    parser.add_argument("--algorithm", choices=["grpo", "verl"], default="grpo")
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct", help="HF model id or local path")
    parser.add_argument("--n-runners", type=int, default=4)
    parser.add_argument("--runner-cpus", type=float, default=1.0, help="CPUs each runner actor requests")
    parser.add_argument("--policy-host", default="127.0.0.1", help="GRPO: address runners reach the policy at")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--checkpoint-dir", default="runs/multinode")
    parser.add_argument("--device", default=None, help="GRPO: cpu / cuda (default: cuda when available)")
    parser.add_argument("--n-gpus-per-node", type=int, default=1)
    parser.add_argument("--nnodes", type=int, default=1)
    args = parser.parse_args(argv)

    store = agl.LightningStoreClient(args.store_url, auth_token=os.environ.get("AGL_STORE_TOKEN"))
    strategy = agl.RayExecutionStrategy(
        n_runners=args.n_runners,
        address=args.ray_address,
        num_cpus=args.runner_cpus,
        managed_store=False,  # the store is `agl store` on the head; runners connect to it directly
    )
    trainer = agl.Trainer(
        algorithm=make_algorithm(args),
        store=store,
        strategy=strategy,
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.2, "heartbeat_interval": 5.0},
    )
    trainer.fit(greeting_agent, train_dataset=GREETINGS)
    print(f"done: {len(strategy.actors)} runner actors, restarts {[a.restarts for a in strategy.actors]}")


if __name__ == "__main__":
    main()
