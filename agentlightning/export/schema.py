"""The columns of an exported trajectory dataset (one row per training row), and parquet / `datasets` I/O."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

__all__ = ["COLUMNS", "to_dataset", "write_parquet", "read_parquet"]

COLUMNS: dict[str, str] = {
    "rollout_id": "rollout the row comes from",
    "attempt_id": "attempt of that rollout whose spans made the row",
    "group_id": "GRPO group (rollouts of the same task); advantages are normalised within it",
    "row_index": "position of the row among the rollout's rows",
    "mode": "train / val / test (null when unknown)",
    "step": "GRPO step that enqueued the rollout (null outside GRPO)",
    "task": "the rollout's input, as JSON",
    "prompt_ids": "prompt token ids",
    "completion_ids": "token ids after the prompt: the model's responses and, between merged turns, context",
    "completion_logprobs": "sampling-time logprob of each completion token (0.0 on context); null when not recorded",
    "completion_loss_mask": "1 for completion tokens the model generated (trained), 0 for context",
    "input_ids": "prompt_ids + completion_ids (TRL's pre-tokenized column)",
    "completion_mask": "0 per prompt token + completion_loss_mask (TRL's completion-only loss column)",
    "labels": "input_ids with -100 wherever completion_mask is 0 (what Hugging Face causal-LM trainers read)",
    "reward": "return of the row's first LLM call (the rollout's reward for single-turn rows)",
    "advantage": "group-normalised advantage of the row",
    "policy_version": "weights version of the policy that sampled the row (null when not recorded)",
    "turns": "LLM calls merged into the row",
    "token_ids_source": "recorded (from the model server) or retokenized (rebuilt from text by the policy tokenizer)",
    "prompt": "prompt messages as JSON (null when not recorded)",
    "completion": "completion text (null when not recorded)",
}
"""Column name -> meaning; every exported row has exactly these keys."""


def _features() -> Any:
    from datasets import Features, Sequence, Value

    ints = Sequence(Value("int64"))
    return Features(
        {
            "rollout_id": Value("string"),
            "attempt_id": Value("string"),
            "group_id": Value("string"),
            "row_index": Value("int32"),
            "mode": Value("string"),
            "step": Value("int64"),
            "task": Value("string"),
            "prompt_ids": ints,
            "completion_ids": ints,
            "completion_logprobs": Sequence(Value("float32")),
            "completion_loss_mask": Sequence(Value("int8")),
            "input_ids": ints,
            "completion_mask": Sequence(Value("int8")),
            "labels": ints,
            "reward": Value("float32"),
            "advantage": Value("float32"),
            "policy_version": Value("int64"),
            "turns": Value("int32"),
            "token_ids_source": Value("string"),
            "prompt": Value("string"),
            "completion": Value("string"),
        }
    )


def _require_datasets() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"exporting trajectories needs the datasets package ({exc}); pip install 'agentlightning[datasets]'"
        ) from exc


def to_dataset(rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as a `datasets.Dataset` with the typed columns of `COLUMNS`."""
    _require_datasets()
    from datasets import Dataset

    return Dataset.from_list(list(rows), features=_features())


def write_parquet(rows: Sequence[dict[str, Any]], path: Union[str, Path]) -> Path:
    """Write the rows to one parquet file (loadable with `datasets.load_dataset("parquet", data_files=...)`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    to_dataset(rows).to_parquet(str(target))
    return target


def read_parquet(path: Union[str, Path]) -> list[dict[str, Any]]:
    """The rows of an exported parquet file; ValueError naming missing columns for other files."""
    _require_datasets()
    from datasets import Dataset

    dataset = Dataset.from_parquet(str(path))
    missing = sorted(set(COLUMNS) - set(dataset.column_names))  # type: ignore[arg-type]
    if missing:
        raise ValueError(f"{path} is not an agentlightning trajectory export: missing columns {missing}")
    return list(dataset)  # type: ignore[arg-type]
