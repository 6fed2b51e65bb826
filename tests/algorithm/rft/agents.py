"""An agent for RFT and schedule tests: one call to the published LLM, rewarded for the vowels it writes."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.types import LLM


@agl.rollout
async def vowel_agent(task: dict[str, Any], llm: LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    response = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], **llm.sampling_parameters
    )
    text = response.choices[0].message.content or ""
    return sum(c in "aeiou" for c in text) / max(1, len(text))
