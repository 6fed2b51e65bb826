"""Write your own prompt-search algorithm: try each candidate prompt through the store and keep the best.

The algorithm (`apo_algorithm`) publishes a candidate `PromptTemplate` as a new resources version,
enqueues a rollout that uses it, waits for a runner to finish it, reads the rollout's final reward from
its spans, and moves on to the next candidate. The agent (`apo_rollout`) asks a model the task's question
with the prompt it was given and scores the answer (1.0 for exactly the expected word, 0.5 when the answer
merely contains it). Algorithm and runner only share the store, so they can run in separate processes:

    # terminal 1: the store
    agl store --port 4747
    # terminal 2: the algorithm
    python examples/apo/apo_custom_algorithm.py algo
    # terminal 3: a runner (OPENAI_API_KEY / OPENAI_BASE_URL point it at any OpenAI-compatible endpoint)
    python examples/apo/apo_custom_algorithm.py runner

Options: `--store-url` (default http://localhost:4747), `--model` (default `APO_AGENT_MODEL` or
gpt-4.1-nano), and for the runner `--max-rollouts` (default: run until Ctrl+C).
`apo_custom_algorithm_trainer.py` runs the same two pieces in one command through `Trainer.fit`.

What to expect: the algorithm prints "[Algo] Updating prompt template to: ..." and "[Algo] Reward: ..."
for each of the three candidates, then "[Algo] Best prompt: ..."; the runner prints
"[Rollout] LLM answered: ..." for each rollout it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any, Optional

from openai import AsyncOpenAI
from rich.console import Console

import agentlightning as agl

console = Console()

TASK = {"question": "What is the capital of France?", "answer": "Paris"}

PROMPT_CANDIDATES = [
    "You are a helpful assistant. {any_question}",
    "You are a knowledgeable AI. Answer with one word only. {any_question}",
    "You are a friendly chatbot. {any_question}",
]


def score_answer(answer: str, expected: str) -> float:
    """1.0 for exactly the expected word (ignoring case and a final period), 0.5 if it is in the answer."""
    cleaned = answer.strip().rstrip(".").strip().lower()
    if cleaned == expected.lower():
        return 1.0
    return 0.5 if expected.lower() in cleaned else 0.0


@agl.rollout
async def apo_rollout(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Ask the model the task's question with the prompt under test; the score is the reward."""
    client = AsyncOpenAI()  # OPENAI_API_KEY and OPENAI_BASE_URL come from the environment
    prompt = prompt_template.format(any_question=task["question"])
    response = await client.chat.completions.create(
        model=os.environ.get("APO_AGENT_MODEL", "gpt-4.1-nano"), messages=[{"role": "user", "content": prompt}]
    )
    answer = response.choices[0].message.content or ""
    console.print(f"[Rollout] LLM answered: {answer!r}")
    return score_answer(answer, task["answer"])


async def apo_algorithm(*, store: agl.LightningStore) -> None:
    """Evaluate every candidate prompt on the task and print the best one."""
    results: list[tuple[str, float]] = []
    for prompt in PROMPT_CANDIDATES:
        # 1. Publish the candidate; the rollout below asks for exactly this resources version.
        console.print(f"[Algo] Updating prompt template to: {prompt!r}")
        update = await store.add_resources({"main_prompt": agl.PromptTemplate(template=prompt, engine="f-string")})
        # 2. Let a runner execute the agent with it.
        rollout = await store.enqueue_rollout(input=TASK, mode="train", resources_id=update.resources_id)
        console.print(f"[Algo] Queued rollout {rollout.rollout_id}; waiting for a runner")
        finished = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=600)
        # 3. The reward is a span of the rollout.
        reward: Optional[float] = None
        if finished:
            reward = agl.find_final_reward(list(await store.query_spans(rollout.rollout_id)))
        console.print(f"[Algo] Reward: {reward if reward is not None else 0.0}")
        results.append((prompt, reward or 0.0))
    # 4. A real algorithm would now derive new candidates from the rewards (see APO).
    best_prompt, best_reward = max(results, key=lambda item: item[1])
    console.print(f"[Algo] Best prompt: {best_prompt!r} (reward {best_reward})")


async def run_algorithm(store_url: str) -> None:
    store = agl.LightningStoreClient(store_url)
    try:
        await apo_algorithm(store=store)
    finally:
        await store.close()


async def run_runner(store_url: str, max_rollouts: Optional[int]) -> None:
    store = agl.LightningStoreClient(store_url)
    runner = agl.LitAgentRunner[Any](agl.OtelTracer(), max_rollouts=max_rollouts, poll_interval=1.0)
    try:
        with runner.run_context(agent=apo_rollout, store=store):
            await runner.iter()
    finally:
        await store.close()


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["algo", "runner"])
    parser.add_argument("--store-url", default="http://localhost:4747")
    parser.add_argument("--model", default=os.environ.get("APO_AGENT_MODEL", "gpt-4.1-nano"))
    parser.add_argument("--max-rollouts", type=int, default=None, help="runner: stop after this many rollouts")
    args = parser.parse_args(argv)
    os.environ["APO_AGENT_MODEL"] = args.model
    if args.mode == "algo":
        asyncio.run(run_algorithm(args.store_url))
    else:
        asyncio.run(run_runner(args.store_url, args.max_rollouts))


if __name__ == "__main__":
    main()
