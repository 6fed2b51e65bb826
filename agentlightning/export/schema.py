"""The columns of an exported trajectory dataset (one row per training row), and parquet / `datasets` I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

__all__ = ["COLUMNS", "exportable_rows", "to_dataset", "write_parquet", "read_parquet"]

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


# Integer columns and the bits their parquet type holds (signed): a value outside is refused, not wrapped.
_INT_BITS: dict[str, int] = {
    "row_index": 32, "step": 64, "turns": 32, "policy_version": 64,
    "prompt_ids": 64, "completion_ids": 64, "input_ids": 64, "labels": 64,
    "completion_loss_mask": 8, "completion_mask": 8,
}  # fmt: skip


def _out_of_range(row: Mapping[str, Any]) -> Optional[str]:
    """Why `row` cannot be written as it is (an integer its column's type cannot hold), or None."""
    for column, bits in _INT_BITS.items():
        value = row.get(column)
        values: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        for index, item in enumerate(values):
            if isinstance(item, int) and not low <= item <= high:
                where = f"{column}[{index}]" if isinstance(value, (list, tuple)) else column
                return f"{where} = {item} does not fit the column's int{bits}"
    return None


def exportable_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows parquet can hold as they are, and a message for each row refused (e.g. a token id >= 2**63)."""
    kept: list[dict[str, Any]] = []
    refused: list[str] = []
    for row in rows:
        problem = _out_of_range(row)
        if problem is None:
            kept.append(row)
        else:
            refused.append(f"row {row.get('row_index')} of rollout {row.get('rollout_id')!r} refused: {problem}")
    return kept, refused


def _require_datasets() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"exporting trajectories needs the datasets package ({exc}); pip install 'agentlightning[datasets]'"
        ) from exc


def to_dataset(rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as a `datasets.Dataset` with the typed columns of `COLUMNS`.

    ValueError naming the first row a column's type cannot hold; `exportable_rows` sets such rows aside.
    """
    _require_datasets()
    from datasets import Dataset

    _, refused = exportable_rows(rows)
    if refused:
        raise ValueError(f"{refused[0]} ({len(refused)} row(s) in all; exportable_rows() sets them aside)")
    return Dataset.from_list(list(rows), features=_features())


def write_parquet(rows: Sequence[dict[str, Any]], path: Union[str, Path]) -> Path:
    """Write the rows to one parquet file at `path`, taken literally (`datasets.load_dataset("parquet", ...)` reads it)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    dataset = to_dataset(rows)
    with target.open("wb") as file:
        dataset.to_parquet(file)
    return target


def read_parquet(path: Union[str, Path]) -> list[dict[str, Any]]:
    """The rows of the exported parquet file at `path` (taken literally, never as a glob pattern).

    ValueError naming the file when it is missing, not parquet, or lacks columns of an export.
    """
    _require_datasets()
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = Path(path)
    if not source.is_file():
        why = "is a directory" if source.is_dir() else "does not exist"
        raise ValueError(f"{source} {why}: give the parquet file written by `agl export`")
    try:
        with source.open("rb") as file:
            table = pq.read_table(file)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{source} is not a readable parquet file ({type(exc).__name__}: {exc})") from None
    missing = sorted(set(COLUMNS) - set(table.column_names))
    if missing:
        raise ValueError(f"{source} is not an agentlightning trajectory export: missing columns {missing}")
    try:
        return table.to_pylist()
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        raise ValueError(f"{source}: its values cannot be read ({type(exc).__name__}: {exc})") from None
