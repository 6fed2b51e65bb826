"""A tiny Llama model and a locally trained byte-level BPE tokenizer with a ChatML template, for fast tests."""

from __future__ import annotations

import functools
import types
from typing import Any, List, Tuple

import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today? I am fine, thank you.",
    "system user assistant tool",
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    "You can call functions to help with the user's request. Available functions:",
    "yes no maybe 0 1 2 3 4 5 6 7 8 9 + - * / = ?",
]


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # type: ignore[assignment]
    tokenizer.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    trainer = trainers.BpeTrainer(  # type: ignore[call-arg]
        vocab_size=384,
        special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 20, trainer=trainer)
    return tokenizer.to_str()


def tiny_tokenizer() -> Any:
    """A fresh `PreTrainedTokenizerFast` (pad id 0, bos `<|im_start|>` id 1, eos `<|im_end|>` id 2)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(seed: int = 0, *, hidden_size: int = 32, layers: int = 2, eos_bias: float = 0.0) -> Tuple[Any, Any]:
    """`(model, tokenizer)`: a randomly initialised float32 Llama (~30k parameters) in eval mode.

    `eos_bias` adds that much to the logit of the end-of-turn token, so answers end on their own (agents
    that treat a length-cut answer as an error, like the OpenAI Agents SDK, need that).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if eos_bias:
        head = torch.nn.Linear(hidden_size, config.vocab_size, bias=True)
        head.weight = model.get_input_embeddings().weight
        with torch.no_grad():
            head.bias.zero_()
            head.bias[tokenizer.eos_token_id] = eos_bias
        model.lm_head = head
    model.eval()
    return model, tokenizer


class ScriptedLM(torch.nn.Module):
    """A stand-in causal LM that emits a fixed token script (then eos), to test text handling exactly.

    It follows the policy engine's calling convention: `position_ids` hold each token's position, and a
    call with more than one token (a prefill) ends the prompt; the token after position p is then
    `script[p - last prompt position]`.
    """

    def __init__(self, script: List[int], vocab_size: int, eos_token_id: int) -> None:
        super().__init__()
        self.script = script
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = types.SimpleNamespace(
            max_position_embeddings=4096,
            eos_token_id=eos_token_id,
            num_hidden_layers=1,
            num_attention_heads=1,
            hidden_size=1,
            vocab_size=vocab_size,
        )
        self._prompt_end = 0

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, **_: Any) -> Any:
        last = position_ids[:, -1]
        if input_ids.shape[1] > 1:
            self._prompt_end = int(last.max())
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab_size), -30.0)
        for row, position in enumerate(last.tolist()):
            step = position - self._prompt_end
            logits[row, -1, self.script[step] if step < len(self.script) else self.eos_token_id] = 30.0
        return types.SimpleNamespace(logits=logits)
