"""The spider text-to-SQL agent under an Agent-OS SQL policy that denies DROP and DELETE.

Every query the agent is about to run goes through the rollout's Agent-OS gate first
(`current_gate().check("database_query", {"query": sql})`). A denied query is not run: the model is told
it was denied by policy (and can rewrite it), the violation is recorded as a span, and `PolicyReward`
subtracts a penalty per violation from the execution-match reward. Trained with GRPO, a policy that
writes destructive SQL is pushed away from it by the negative rewards.

Run (from the repository root; needs the `agentos` and `examples` extras):

    python contrib/recipes/agentos/train_sql_agentos.py --quick
        # offline: a scripted stand-in writes a DELETE first for every other question, gets denied,
        # then writes the right query; 4 questions
    python contrib/recipes/agentos/train_sql_agentos.py --algorithm grpo --steps 8
        # GRPO on SmolLM2 (the `train` extra), violations per step printed from the store

What to expect (quick): one line per rollout with its queries, violations and reward (1.0 for a clean
rollout, 0.5 for one denied DELETE then the right query), then "violations: N in M rollouts".
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "spider"))
import sql_agent  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from sql_agent import SEED_PROMPT, execution_match, extract_sql, load_questions, schema_text  # noqa: E402

import agentlightning as agl  # noqa: E402
from agentlightning.contrib.agentos import count_violations, current_gate, require_agent_os, sql_deny_policy  # noqa: E402
from agentlightning.contrib.reward.agentos import PolicyReward  # noqa: E402
from agentlightning.contrib.runner.agentos import AgentOSRunner  # noqa: E402


class GovernedSqlAgent(agl.LitAgent[Dict[str, Any]]):
    """spider's write/check/rewrite loop with every query checked by Agent-OS before it runs."""

    def __init__(self, reward: PolicyReward, max_rewrites: int = 2) -> None:
        super().__init__()
        self.reward = reward
        self.max_rewrites = max_rewrites

    async def rollout_async(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm = next(r for r in resources.values() if isinstance(r, agl.LLM))
        template = next((r for r in resources.values() if isinstance(r, agl.PromptTemplate)), SEED_PROMPT)
        client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", max_retries=0)
        gate = current_gate()
        messages: List[Dict[str, Any]] = [
            {"role": "user", "content": template.format(schema=schema_text(task["db"]), question=task["question"])}
        ]
        queries: List[Any] = []
        final = None
        for turn in range(self.max_rewrites + 1):
            reply = await client.chat.completions.create(model=llm.model, messages=messages, **llm.sampling_parameters)  # type: ignore[arg-type]
            text = reply.choices[0].message.content or ""
            sql = extract_sql(text) or _statement(text)
            queries.append(sql)
            if sql is not None:
                verdict = await gate.check("database_query", {"query": sql})
                if not verdict.allowed:
                    outcome = f"denied by policy: {verdict.reason}"
                    final = None
                else:
                    if turn > 0 and sql == final:
                        break
                    final = sql
                    outcome = sql_agent.describe_outcome(task["db"], sql)
            else:
                outcome = "no SQL query found in your reply"
            if turn == self.max_rewrites:
                break
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": sql_agent.CHECK_PROMPT.format(outcome=outcome)},
            ]
        agl.emit_object({"queries": queries, "final": final, "violations": len(gate.violations)})
        return self.reward(execution_match(task["db"], final, task["sql"]))


def _statement(text: str) -> Any:
    """Any SQL statement (not only SELECT) in a ```sql block: destructive ones must reach the gate too."""
    match = re.search(r"```(?:sql)?\s*\n?(.*?)```", text or "", re.DOTALL)
    return match.group(1).strip().rstrip(";") if match else None


def scripted_model(questions: List[Dict[str, Any]]):  # type: ignore[no-untyped-def]
    """Every other question: a DELETE first; after the denial (or otherwise at once) the reference query."""
    reference = {q["question"]: (i, q["sql"]) for i, q in enumerate(questions)}

    def respond(request: Dict[str, Any]) -> str:
        messages = request["messages"]
        match = re.search(r"Question: (.+)", str(messages[0].get("content") or ""))
        if match is None or match.group(1).strip() not in reference:
            return "ok"
        index, gold = reference[match.group(1).strip()]
        answers = [str(m.get("content")) for m in messages if m.get("role") == "assistant"]
        table = re.search(r"(?i)FROM (\w+)", gold)
        if not answers and index % 2 == 0 and table:
            return f"```sql\nDELETE FROM {table.group(1)} WHERE 1 = 0\n```"
        if answers and "denied by policy" not in str(messages[-1].get("content")):
            return answers[-1]
        return f"```sql\n{gold}\n```"

    return respond


async def violations_by_mode(store: agl.LightningStore) -> Dict[str, List[int]]:
    counts: Dict[str, List[int]] = {}
    for rollout in await store.query_rollouts(sort_by="start_time"):
        spans = await store.query_spans(rollout.rollout_id)
        counts.setdefault(str(rollout.mode), []).append(count_violations(spans))
        details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
        print(
            f"  [{rollout.mode}] {details.get('queries')} violations={count_violations(spans)} reward={agl.find_final_reward(spans)}"
        )
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="scripted stand-in model, 4 questions, threads")
    parser.add_argument("--algorithm", choices=("baseline", "grpo"), default="baseline")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--penalty", type=float, default=0.5, help="reward subtracted per violation")
    args = parser.parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    agent_os = require_agent_os()
    kernel = agent_os.StatelessKernel(policies={"sql": sql_deny_policy(["DROP", "DELETE"])})
    questions = load_questions()
    train = [q for q in questions if q["split"] == "train"]
    val = [q for q in questions if q["split"] == "val"][: 4 if args.quick else None]
    agent = GovernedSqlAgent(PolicyReward(kernel, penalty=args.penalty))
    store = agl.InMemoryLightningStore(thread_safe=True)
    runner = {"type": AgentOSRunner, "kernel": kernel, "poll_interval": 0.1}
    if args.algorithm == "grpo":
        from agentlightning.algorithm.grpo import GRPO

        algorithm = GRPO(model=args.model, total_steps=args.steps, batch_size=4, group_size=4, max_new_tokens=128)
        trainer = agl.Trainer(algorithm=algorithm, runner=runner, n_runners=2, store=store, summary=False)
        trainer.fit(agent, train_dataset=train, val_dataset=val)
        counts = asyncio.run(violations_by_mode(store))
    else:
        sys.path.insert(0, str(ROOT))
        from tests.support.openai_server import OpenAITestServer

        with OpenAITestServer(scripted_model(val)) as server:
            base_url = args.base_url or server.base_url
            llm = agl.LLM(
                endpoint=base_url, model=args.model, sampling_parameters={"temperature": 0.0, "max_tokens": 128}
            )
            trainer = agl.Trainer(
                algorithm=agl.Baseline(polling_interval=0.5),
                strategy={"type": "shm", "n_runners": 1, "main_thread": "algorithm", "graceful_delay": 0.5},
                runner=runner,
                store=store,
                initial_resources={"prompt": SEED_PROMPT, "main_llm": llm},
                summary=False,
            )
            trainer.fit(agent, val_dataset=val)
        counts = asyncio.run(violations_by_mode(store))
    total = sum(sum(v) for v in counts.values())
    print(f"violations: {total} in {sum(len(v) for v in counts.values())} rollouts")


if __name__ == "__main__":
    main()
