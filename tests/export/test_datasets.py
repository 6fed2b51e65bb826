"""Trajectories as Hugging Face datasets: a store's rollouts -> parquet -> `datasets` -> TRL, and back into a store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentlightning.cli import main as agl
from agentlightning.export import COLUMNS, import_rows, read_parquet, rows_from_store, to_dataset, write_parquet
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import Span

pytest.importorskip("datasets", reason="the datasets extra is not installed")

# Token ids < 384 so the tiny model of tests/support can train on them.
TURN_1 = ([10, 11, 12], [20, 21])
TURN_2 = ([10, 11, 12, 20, 21, 30, 31], [40, 41, 42])  # extends turn 1: merged into one row with context 30, 31


def _call(prompt: list[int], response: list[int], version: int) -> dict[str, Any]:
    return {
        "gen_ai.system": "openai",
        "gen_ai.request.type": "chat",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "question",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "answer",
        "gen_ai.response.system_fingerprint": f"weights-v{version}",
        "prompt_token_ids": prompt,
        "response_token_ids": response,
        "logprobs.content": json.dumps([{"logprob": -0.5 - i} for i in range(len(response))]),
    }


async def _rollout(store: Any, task: str, group: int, calls: list[dict[str, Any]], reward: float) -> str:
    attempted = await store.start_rollout(input={"task": task}, mode="train", metadata={"grpo_group": group})
    rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
    clock = attempted.start_time
    for name, attributes in [*(("openai.chat.completion", c) for c in calls), ("agentlightning.reward", {})]:
        if name == "agentlightning.reward":
            attributes = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward}
        sequence_id = await store.get_next_span_sequence_id(rid, aid)
        span = Span.from_attributes(
            attributes=attributes, rollout_id=rid, attempt_id=aid, sequence_id=sequence_id, name=name,
            start_time=clock, end_time=clock + 0.001,
        )  # fmt: skip
        await store.add_span(span)
        clock += 0.01
    await store.update_attempt(rid, aid, status="succeeded")
    return rid


async def _seeded_store() -> InMemoryLightningStore:
    """Two GRPO groups of two rollouts; one rollout is two turns that merge into one masked row."""
    store = InMemoryLightningStore()
    await _rollout(store, "a", 0, [_call(*TURN_1, 3), _call(*TURN_2, 3)], 1.0)
    await _rollout(store, "a", 0, [_call(*TURN_1, 3)], 0.0)
    await _rollout(store, "b", 1, [_call([50, 51], [60], 4)], 0.5)
    await _rollout(store, "b", 1, [_call([50, 51], [61, 62], 4)], 0.5)
    return store


def _by_key(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("group_id", "row_index", "prompt_ids", "completion_ids", "completion_loss_mask", "reward", "advantage")
    return sorted(tuple(json.dumps(row[k]) for k in keys) + (row["policy_version"],) for row in rows)


def test_store_rows_carry_token_ids_masks_logprobs_rewards_advantages_and_versions() -> None:
    rows = asyncio.run(rows_from_store(asyncio.run(_seeded_store())))
    assert len(rows) == 4 and all(set(row) == set(COLUMNS) for row in rows)
    merged = next(row for row in rows if row["completion_ids"][-1] == 42)
    assert merged["prompt_ids"] == TURN_1[0]
    assert merged["completion_ids"] == [20, 21, 30, 31, 40, 41, 42]
    assert merged["completion_loss_mask"] == [1, 1, 0, 0, 1, 1, 1]
    assert merged["completion_logprobs"] == [-0.5, -1.5, 0.0, 0.0, -0.5, -1.5, -2.5]
    assert merged["input_ids"] == merged["prompt_ids"] + merged["completion_ids"]
    assert merged["completion_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert (merged["reward"], merged["turns"], merged["policy_version"]) == (1.0, 2, 3)
    assert merged["token_ids_source"] == "recorded" and json.loads(merged["task"]) == {"task": "a"}
    advantages = {row["group_id"]: [] for row in rows}
    for row in rows:
        advantages[row["group_id"]].append(row["advantage"])
    assert sorted(advantages["0"]) == pytest.approx([-0.7071, 0.7071], abs=1e-3)  # (r - mean) / sample std
    assert advantages["1"] == [0.0, 0.0]  # tied group


def test_parquet_export_loads_with_datasets_and_trains_a_tiny_model_with_trl(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="the trl package is not installed")
    from datasets import load_dataset
    from transformers import PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from tests.support.tiny_model import tiny_model

    path = write_parquet(asyncio.run(rows_from_store(asyncio.run(_seeded_store()))), tmp_path / "rollouts.parquet")
    dataset = load_dataset("parquet", data_files=str(path), split="train")
    assert dataset.num_rows == 4 and set(dataset.column_names) == set(COLUMNS)

    # TRL's collator pads the rows; the loss sees only the tokens the policy generated, -100 elsewhere.
    collator = DataCollatorForLanguageModeling(pad_token_id=0)
    batch = collator([{k: dataset[i][k] for k in ("input_ids", "labels")} for i in range(dataset.num_rows)])
    first = next(i for i in range(dataset.num_rows) if dataset[i]["completion_ids"][-1] == 42)
    labels = batch["labels"][first].tolist()
    assert labels[:10] == [-100, -100, -100, 20, 21, -100, -100, 40, 41, 42] and set(labels[10:]) <= {-100}
    assert batch["input_ids"].shape == (4, 10)

    # TRL's SFT trainer consumes the pre-tokenized columns as they are, on CPU.
    model, tokenizer = tiny_model()
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    train = dataset.select_columns(["input_ids", "completion_mask"])
    config = SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=2,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        completion_only_loss=True,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=train, processing_class=tokenizer)
    assert trainer.train_dataset is not None
    assert trainer.train_dataset[first]["labels"] == dataset[first]["labels"]  # TRL folds completion_mask the same way
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss > 0


def test_import_then_export_gives_the_same_rows(tmp_path: Path) -> None:
    source = asyncio.run(rows_from_store(asyncio.run(_seeded_store())))
    target = SqliteLightningStore(tmp_path / "imported.db")

    async def round_trip() -> list[dict[str, Any]]:
        report = await import_rows(target, source)
        assert sorted(report.created) == sorted({row["rollout_id"] for row in source})
        try:
            return await rows_from_store(target)
        finally:
            await target.close()

    again = asyncio.run(round_trip())
    assert _by_key(again) == _by_key(source)
    assert [r["completion_logprobs"] for r in sorted(again, key=lambda r: r["completion_ids"])] == [
        r["completion_logprobs"] for r in sorted(source, key=lambda r: r["completion_ids"])
    ]


def test_agl_export_and_import_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "source.db"

    async def seed() -> None:
        store = SqliteLightningStore(database)
        await _rollout(store, "c", 0, [_call([1, 2], [3], 1)], 1.0)
        await _rollout(store, "c", 0, [_call([1, 2], [4], 1)], 0.0)
        await store.close()

    asyncio.run(seed())
    exported = tmp_path / "out" / "rows.parquet"
    assert agl(["export", str(exported), "--backend", "sqlite", "--path", str(database)]) == 0
    assert "2 row(s) from 2 rollout(s)" in capsys.readouterr().out
    assert to_dataset(read_parquet(exported)).num_rows == 2
    copy = tmp_path / "copy.db"
    assert agl(["import", str(exported), "--backend", "sqlite", "--path", str(copy)]) == 0
    assert "2 row(s) imported as 2 rollout(s)" in capsys.readouterr().out
    not_ours = tmp_path / "other.parquet"
    to_dataset(read_parquet(exported)).remove_columns(["advantage"]).to_parquet(str(not_ours))
    assert agl(["import", str(not_ours), "--backend", "sqlite", "--path", str(copy)]) == 2
    assert "missing columns ['advantage']" in capsys.readouterr().out
