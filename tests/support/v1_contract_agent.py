"""An agent written to v1.0's harness contract, as every v1.0 example agent is: no agentlightning import.

The runner builds the class with no arguments and calls `run()`. It reads `AGL_OPENAI_BASE_URL`,
`AGL_EVENT_URL` and `AGL_KEY`, asks the model with `model="auto"` (v1.0's gateway picks the real model),
and posts `{"event_type": "reward", "data": {"value": ...}}`. Its task comes in `QUESTION` / `ANSWER`.
"""

from __future__ import annotations

import os

import httpx
from openai import AsyncOpenAI


class V1ContractAgent:
    async def run(self) -> None:
        key = os.environ["AGL_KEY"]
        client = AsyncOpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key, max_retries=5)
        reply = await client.chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": os.environ["QUESTION"]}],
            max_tokens=16,
        )
        await client.close()
        text = reply.choices[0].message.content or ""
        reward = 1.0 if os.environ["ANSWER"] in text else 0.0
        async with httpx.AsyncClient(timeout=30) as http:
            posted = await http.post(
                os.environ["AGL_EVENT_URL"],
                json={"event_type": "reward", "data": {"value": reward}},
                headers={"Authorization": f"Bearer {key}"},
            )
            posted.raise_for_status()
