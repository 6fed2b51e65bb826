"""Where a template re-renders an earlier turn differently, the merge breaks and the break is counted.

Qwen3's template drops the reasoning of assistant turns before the last user query: after a second user
turn, the prompt no longer extends the first prompt + reply. Each call's ids stay exact; the trajectory
starts a new row and the break's cause is `chat_template` (GRPO's `breaks_chat_template`).
"""

from __future__ import annotations

import openai
import pytest

pytest.importorskip("torch", reason="needs the train extra")

from agentlightning.adapter.trajectory import TurnTokens, break_counts, merge_turns  # noqa: E402
from agentlightning.serving.server import PolicyServer  # noqa: E402
from tests.support.chat_templates import answer_reply, family_tokenizer, sampled_ids  # noqa: E402
from tests.support.policy_capture import PromptScriptedLM  # noqa: E402

pytestmark = [pytest.mark.train]


def test_a_thinking_template_drops_earlier_reasoning_and_the_break_is_counted() -> None:
    tokenizer = family_tokenizer("qwen3_thinking")
    model = PromptScriptedLM(
        tokenizer, lambda prompt: answer_reply("qwen3_thinking", "Paris."), lambda text: sampled_ids(tokenizer, text)
    )
    with PolicyServer(model, tokenizer, deterministic=True, default_max_tokens=64) as server:
        client = openai.OpenAI(base_url=server.endpoint, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "Capital of France?"}]
        first = client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "Sure?"},
        ]
        second = client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
        client.close()
    assert "<think>" in str(first.choices[0].message.content)
    eos = tokenizer.eos_token_id
    served = [(prompt, reply + [eos]) for prompt, reply in model.calls]
    returned = [(r.model_extra["prompt_token_ids"], r.choices[0].model_extra["token_ids"]) for r in (first, second)]  # type: ignore[index]
    assert returned == served  # each call: the ids it was given and sampled
    second_prompt = tokenizer.decode(served[1][0])
    assert "Let me check" not in second_prompt.split("Sure?")[0]  # the first turn's reasoning is gone
    rows, breaks = merge_turns([TurnTokens(p, r, index=i) for i, (p, r) in enumerate(served)], decode=tokenizer.decode)
    assert len(rows) == 2 and break_counts(breaks) == {"chat_template": 1, "retokenization": 0, "other": 0}
