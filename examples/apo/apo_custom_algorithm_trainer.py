"""Run the custom prompt-search algorithm of `apo_custom_algorithm.py` and its agent with one command.

Wrapping the algorithm function with `@algo` makes it a trainer component: the trainer injects the
store (any of `store`, `train_dataset`, `val_dataset`, `llm_proxy`, `adapter`, `initial_resources` can be
declared as keyword parameters), starts a store and a runner, and stops the runner when the algorithm
returns.

    export OPENAI_API_KEY=sk-...        # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    python examples/apo/apo_custom_algorithm_trainer.py

Options: `--model` (the agent's model), `--strategy cs|shm` (client-server with a store on `--port`,
the default, or everything in one process), `--port`.

What to expect: the same output as running `apo_custom_algorithm.py algo` and `... runner` side by
side: three "[Algo] Updating prompt template to: ..." / "[Rollout] LLM answered: ..." / "[Algo] Reward:
..." groups, then "[Algo] Best prompt: ...".
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Optional

from apo_custom_algorithm import apo_algorithm, apo_rollout

import agentlightning as agl
from agentlightning.algorithm import algo


@algo
async def apo_algorithm_usable_in_trainer(*, store: agl.LightningStore) -> None:
    """The plain algorithm function, made usable as `Trainer(algorithm=...)`."""
    await apo_algorithm(store=store)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("APO_AGENT_MODEL", "gpt-4.1-nano"))
    parser.add_argument("--strategy", choices=["cs", "shm"], default="cs")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    os.environ["APO_AGENT_MODEL"] = args.model  # runner processes inherit it

    strategy: dict[str, Any] = {"type": args.strategy}
    if args.strategy == "shm":
        strategy["main_thread"] = "algorithm"
    trainer = agl.Trainer(
        n_runners=1,
        algorithm=apo_algorithm_usable_in_trainer,
        strategy=strategy,
        port=args.port,
        runner={"poll_interval": 0.5},
    )
    trainer.fit(apo_rollout)


if __name__ == "__main__":
    main()
