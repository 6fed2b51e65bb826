"""A harnessed agent in plain Python: it never imports agentlightning.

`ProcessAgent(command=[sys.executable, "examples/harness/python_agent.py"], env_map={...})` starts it once
per rollout. Everything it needs comes from the environment:

- AGL_OPENAI_BASE_URL / AGL_KEY: a stock OpenAI client pointed at the rollout's gateway URL;
- AGL_MODEL: the model to ask for; QUESTION / ANSWER: task fields mapped in by `env_map`;
- AGL_EVENT_URL: where the reward is posted (with httpx).

It asks the question, then asks (streamed) for a final answer, and posts reward 1.0 when the final
answer contains the expected one. Exit status 0 marks the rollout succeeded.
"""

from __future__ import annotations

import os
import sys

import httpx
from openai import OpenAI

SYSTEM_PROMPT = "You are a careful calculator. Answer with the number only."


def main() -> int:
    key = os.environ["AGL_KEY"]
    client = OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key, max_retries=0)
    model = os.environ.get("AGL_MODEL", "default")
    question, expected = os.environ["QUESTION"], os.environ["ANSWER"]

    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    first = client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    draft = first.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": "Final answer?"}]

    final = ""
    stream = client.chat.completions.create(model=model, messages=messages, stream=True)  # type: ignore[arg-type]
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            final += chunk.choices[0].delta.content

    reward = 1.0 if expected in final else 0.0
    response = httpx.post(
        os.environ["AGL_EVENT_URL"],
        json={"event_type": "reward", "data": {"value": reward}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30.0,
    )
    response.raise_for_status()
    print(f"question={question!r} final={final!r} reward={reward}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
