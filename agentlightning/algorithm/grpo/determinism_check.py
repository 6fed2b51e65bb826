"""The self-check of deterministic mode: before a deterministic run starts, prove that the mode applies.

A flag that never reaches the code it should change is the usual way "deterministic" modes fail. So with
`GRPOConfig(deterministic=True)` GRPO first checks the settings the mode relies on (the policy engine
decodes one request at a time, torch runs deterministic algorithms, cuBLAS has a fixed workspace on CUDA),
then replays a fixed prompt twice on the served policy: alone (a batch of 1), and submitted together with
`batch_size - 1` other requests. Both completions must be the same tokens with bit-identical logprobs;
otherwise the run refuses to start (`DeterminismError`) and names the first difference. The report goes to
the run's metadata (`GRPO.run_metadata`, `run.json`, the tracking config) and its summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import struct
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...serving.engine import PolicyEngine, SequenceEnd

__all__ = ["DeterminismError", "DeterminismReport", "check_determinism"]

REPLAY_PROMPT = "Count from one to ten, then name three colours."
"""The fixed prompt replayed at two batch sizes."""
_REPLAY_SEED = 20_240_601
_CUBLAS_SETTINGS = (":4096:8", ":16:8")


class DeterminismError(RuntimeError):
    """Deterministic mode was asked for but does not hold; the message names what differs."""


@dataclasses.dataclass(frozen=True)
class DeterminismReport:
    """What the self-check compared and found (`problems` empty: it passed)."""

    batch_sizes: List[int]
    tokens_compared: int
    engine_deterministic: bool
    torch_deterministic: bool
    device: str
    problems: List[str]

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> Dict[str, Any]:
        return {"passed": self.passed, **dataclasses.asdict(self)}


def _bits(value: float) -> str:
    return struct.pack(">d", value).hex()


def compare_completions(alone: SequenceEnd, batched: SequenceEnd, batch_size: int) -> List[str]:
    """The first token and the first logprob at which two completions of the same request differ, if any."""
    problems: List[str] = []
    for position, (a, b) in enumerate(zip(alone.token_ids, batched.token_ids, strict=False)):
        if a != b:
            problems.append(f"token {position}: id {a} alone vs {b} in a batch of {batch_size}")
            break
    if len(alone.token_ids) != len(batched.token_ids):
        problems.append(f"length: {len(alone.token_ids)} tokens alone vs {len(batched.token_ids)} in a batch")
    for position, (a, b) in enumerate(zip(alone.logprobs, batched.logprobs, strict=False)):
        if _bits(a) != _bits(b):
            problems.append(
                f"logprob of token {position}: {a!r} (0x{_bits(a)}) alone vs {b!r} (0x{_bits(b)}) "
                f"in a batch of {batch_size}"
            )
            break
    return problems


def _settings_problems(engine: PolicyEngine) -> List[str]:
    import torch

    problems: List[str] = []
    if not engine.deterministic:
        problems.append("the policy engine is not in deterministic mode (it batches requests by arrival time)")
    if engine.prefix_cache is not None:
        problems.append("the policy engine keeps a prefix cache (hits change the logits in their last bits)")
    if not torch.are_deterministic_algorithms_enabled():
        problems.append("torch.use_deterministic_algorithms is off")
    device = next(engine.model.parameters()).device
    if device.type == "cuda" and os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _CUBLAS_SETTINGS:
        problems.append(
            "CUBLAS_WORKSPACE_CONFIG is not ':4096:8' or ':16:8' (cuBLAS is not deterministic without it); "
            "set it before the process first uses CUDA"
        )
    return problems


def _prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> List[int]:
    from ...serving.chat import render_chat_prompt

    return render_chat_prompt(tokenizer, [{"role": "user", "content": text}])


async def check_determinism(
    engine: PolicyEngine,
    tokenizer: PreTrainedTokenizerBase,
    *,
    batch_size: int = 4,
    max_tokens: int = 16,
    adapter: Optional[str] = None,
) -> DeterminismReport:
    """Check the settings and replay `REPLAY_PROMPT` alone and in a batch of `batch_size` on a running `engine`.

    The replay's requests carry explicit seeds, so they leave the content-derived seeds of the run's own
    requests as they were.
    """
    from ...serving.sampling import SamplingParams

    if batch_size < 2:
        raise ValueError(f"batch_size must be >= 2 to compare two batch sizes, got {batch_size}")
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=_REPLAY_SEED, logprobs=True, ignore_eos=True)
    prompt = _prompt(tokenizer, REPLAY_PROMPT)
    alone = (await engine.generate(prompt, params, adapter=adapter))[0]
    fixed = engine.submit(prompt, params, adapter=adapter)
    others = [
        engine.submit(_prompt(tokenizer, f"Request {i}: {REPLAY_PROMPT}"), dataclasses.replace(params, seed=i))
        for i in range(1, batch_size)
    ]
    batched, *_ = await asyncio.gather(fixed.collect(), *(other.collect() for other in others))
    problems = _settings_problems(engine) + compare_completions(alone, batched[0], batch_size)
    import torch

    return DeterminismReport(
        batch_sizes=[1, batch_size],
        tokens_compared=min(len(alone.token_ids), len(batched[0].token_ids)),
        engine_deterministic=engine.deterministic,
        torch_deterministic=torch.are_deterministic_algorithms_enabled(),
        device=str(next(engine.model.parameters()).device),
        problems=problems,
    )


def refuse_unless_passed(report: DeterminismReport) -> None:
    """Raise `DeterminismError` listing the problems of a failed check."""
    if report.passed:
        return
    raise DeterminismError(
        "deterministic=True was asked for, but the self-check found: "
        + "; ".join(report.problems)
        + ". Refusing to start a run that would not be reproducible."
    )


def summary_line(report: Optional[Dict[str, Any]], steps: int) -> str:
    """One line for the end of a run: the steps trained, deterministic mode and what its check found."""
    if report is None:
        return f"{steps} steps trained; deterministic mode off"
    if not report["passed"]:
        return f"{steps} steps trained; deterministic mode on, self-check FAILED: {'; '.join(report['problems'])}"
    return (
        f"{steps} steps trained; deterministic mode on, self-check passed "
        f"({report['tokens_compared']} tokens bit-identical at batch sizes {report['batch_sizes']})"
    )
