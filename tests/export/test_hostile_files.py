"""`agl export` / `agl import` against what an unlucky user or an attacker hands them.

A token id parquet cannot hold refuses that row only; a hostile import file is refused with a message naming
the row and the field (never a traceback) and writes nothing; a `null` reward imports a finished rollout;
importing a file again changes nothing; paths are taken literally, never as glob patterns.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest

from agentlightning.cli import main as agl
from agentlightning.export import import_rows, read_parquet
from agentlightning.store.sqlite import SqliteLightningStore

from .test_datasets import _call, _rollout

pytest.importorskip("datasets", reason="the datasets extra is not installed")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

Rows = list[dict[str, Any]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real export of two finished rollouts (one with two rows, `--aggregation transition`)."""
    directory = tmp_path_factory.mktemp("export")
    database = directory / "source.db"

    async def seed() -> None:
        store = SqliteLightningStore(database)
        await _rollout(store, "a", 0, [_call([1, 2], [3, 4], 1), _call([5], [6], 1)], 1.0)
        await _rollout(store, "b", 0, [_call([7, 8], [9], 2)], 0.5)
        await store.close()

    asyncio.run(seed())
    path = directory / "rows.parquet"
    assert (
        agl(["export", str(path), "--backend", "sqlite", "--path", str(database), "--aggregation", "transition"]) == 0
    )
    return path


def _rows(path: Path) -> Rows:
    return sorted(read_parquet(path), key=lambda r: (r["rollout_id"], r["row_index"]))


def _set(column: str, value: Any, row: Optional[int] = -1) -> Callable[[Rows], Rows]:
    """Set `column` of one row (every row with `row=None`: a column of another type than the export's)."""

    def change(rows: Rows) -> Rows:
        for index in range(len(rows)) if row is None else [row]:
            rows[index][column] = value
        return rows

    return change


def _repeat_row_index(rows: Rows) -> Rows:
    """The two rows of the two-call rollout both claim row_index 0."""
    for row in rows:
        if row["row_index"] == 1:
            row["row_index"] = 0
    return rows


def _drop(column: str) -> Callable[[Rows], Rows]:
    return lambda rows: [{k: v for k, v in r.items() if k != column} for r in rows]


# (case, change to the exported rows, what the message must name); the last row (row 2) unless said.
HOSTILE_ROWS: list[tuple[str, Callable[[Rows], Rows], str]] = [
    ("missing column", _drop("reward"), "missing columns ['reward']"),
    ("null rollout_id", _set("rollout_id", None), "rollout_id"),
    ("empty rollout_id", _set("rollout_id", ""), "rollout_id"),
    ("NUL in rollout_id", _set("rollout_id", "ro\x00x"), "rollout_id"),
    ("negative row_index", _set("row_index", -1), "row_index"),
    ("null row_index", _set("row_index", None), "row_index"),
    ("repeated row_index", _repeat_row_index, "row_index values repeat"),
    ("unknown mode", _set("mode", "bogus"), "mode"),
    ("task not JSON", _set("task", "{oops"), "task is not JSON"),
    ("task NaN", _set("task", '{"x": NaN}'), "NaN"),
    ("task nested 100000 deep", _set("task", "[" * 100_000 + "]" * 100_000), "task nests too deeply"),
    ("string token ids", _set("prompt_ids", ["a", "b"], row=None), "prompt_ids[0]"),
    ("negative token id", _set("prompt_ids", [1, -5]), "prompt_ids[1]"),
    ("null prompt_ids", _set("prompt_ids", None), "prompt_ids"),
    ("mask value 2", _set("completion_loss_mask", [2]), "completion_loss_mask[0]"),
    ("mask too short", _set("completion_loss_mask", []), "completion_loss_mask has 0 values for 1"),
    ("logprobs too long", _set("completion_logprobs", [-0.1, -0.2]), "completion_logprobs has 2 values"),
    ("NaN logprob", _set("completion_logprobs", [float("nan")]), "completion_logprobs[0]"),
    ("NaN reward", _set("reward", float("nan")), "reward"),
    ("infinite reward", _set("reward", float("inf")), "reward"),
    ("string reward", _set("reward", "1.0", row=None), "reward"),
    ("string step", _set("step", "3", row=None), "step"),
    ("unknown token_ids_source", _set("token_ids_source", "guessed"), "token_ids_source"),
    ("list as prompt", _set("prompt", ["x"], row=None), "prompt"),
]


def _write(rows: Rows, path: Path, schema: Any = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _count(database: Path) -> int:
    async def count() -> int:
        store = SqliteLightningStore(database)
        try:
            return len(list(await store.query_rollouts()))
        finally:
            await store.close()

    return asyncio.run(count())


def _refused(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], named: str) -> str:
    database = tmp_path / "target.db"
    assert agl(["import", str(path), "--backend", "sqlite", "--path", str(database)]) == 2
    captured = capsys.readouterr()
    assert named in captured.out, captured.out
    assert "Traceback" not in captured.out + captured.err
    assert _count(database) == 0, "a refused file writes nothing"
    return captured.out


@pytest.mark.parametrize(("change", "named"), [c[1:] for c in HOSTILE_ROWS], ids=[c[0] for c in HOSTILE_ROWS])
def test_a_hostile_row_is_refused_naming_row_and_field_and_nothing_is_written(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[Rows], Rows], named: str
) -> None:
    path = _write(change(_rows(exported)), tmp_path / "hostile.parquet")
    message = _refused(path, tmp_path, capsys, named)
    if named.startswith("missing"):
        return
    assert "nothing imported: " in message and ("row 2" in message or "rollout '" in message), message
    with pytest.raises(ValueError, match="nothing imported"):  # the API refuses it the same way
        asyncio.run(import_rows(SqliteLightningStore(tmp_path / "api.db"), read_parquet(path)))
    assert _count(tmp_path / "api.db") == 0


def test_token_ids_beyond_int64_in_a_file_name_the_row(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(exported)
    rows[-1]["prompt_ids"] = [7, 2**63]
    schema = pa.Table.from_pylist(_rows(exported)).schema
    schema = schema.set(schema.get_field_index("prompt_ids"), pa.field("prompt_ids", pa.list_(pa.uint64())))
    path = _write(rows, tmp_path / "uint64.parquet", schema)
    _refused(path, tmp_path, capsys, "row 2 (rollout ")
    database = tmp_path / "target.db"
    agl(["import", str(path), "--backend", "sqlite", "--path", str(database)])
    assert "prompt_ids[1]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"", "is not a readable parquet file"),
        (b"rollout_id,row_index\nro-1,0\n", "is not a readable parquet file"),
        (None, "is not a readable parquet file"),  # a truncated export
    ],
    ids=["empty file", "csv", "truncated parquet"],
)
def test_a_file_that_is_not_parquet_is_refused(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, named: str
) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(content if content is not None else exported.read_bytes()[: exported.stat().st_size // 2])
    _refused(path, tmp_path, capsys, named)


def test_paths_are_taken_literally(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(exported, tmp_path / "rows.parquet")
    _refused(tmp_path / "r*.parquet", tmp_path, capsys, "does not exist")  # not a glob matching rows.parquet
    _refused(tmp_path, tmp_path, capsys, "is a directory")
    bracketed = tmp_path / "rows[0].parquet"
    shutil.copy(exported, bracketed)
    assert agl(["import", str(bracketed), "--backend", "sqlite", "--path", str(tmp_path / "ok.db")]) == 0
    assert "3 row(s) imported as 2 rollout(s)" in capsys.readouterr().out
    written = tmp_path / "out[1]" / "a*.parquet"
    assert agl(["export", str(written), "--backend", "sqlite", "--path", str(tmp_path / "ok.db")]) == 0
    assert written.is_file() and len(read_parquet(written)) == 3


def test_importing_the_same_file_again_changes_nothing(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "target.db"
    command = ["import", str(exported), "--backend", "sqlite", "--path", str(database)]
    assert agl(command) == 0 and "imported as 2 rollout(s)" in capsys.readouterr().out
    assert agl(command) == 0
    assert "imported as 0 rollout(s); 2 rollout(s) already in the store, skipped" in capsys.readouterr().out
    assert _count(database) == 2


def test_a_null_reward_imports_a_finished_rollout_without_reward(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{**row, "reward": None} for row in _rows(exported)]
    path = _write(rows, tmp_path / "no_reward.parquet")
    database = tmp_path / "target.db"
    assert agl(["import", str(path), "--backend", "sqlite", "--path", str(database)]) == 0

    async def statuses() -> list[str]:
        store = SqliteLightningStore(database)
        try:
            return sorted(r.status for r in await store.query_rollouts())
        finally:
            await store.close()

    assert asyncio.run(statuses()) == ["succeeded", "succeeded"], "no rollout is left running"
    again = tmp_path / "again.parquet"
    assert agl(["export", str(again), "--backend", "sqlite", "--path", str(database)]) == 0
    assert {row["reward"] for row in read_parquet(again)} == {0.0}  # the export's fill value for no reward


def test_a_token_id_beyond_int64_refuses_that_row_and_the_rest_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "source.db"

    async def seed() -> None:
        store = SqliteLightningStore(database)
        await _rollout(store, "big", 0, [_call([1, 2**63], [3], 1)], 1.0)
        await _rollout(store, "fine", 1, [_call([1, 2], [3], 1)], 1.0)
        await store.close()

    asyncio.run(seed())
    path = tmp_path / "rows.parquet"
    assert agl(["export", str(path), "--backend", "sqlite", "--path", str(database)]) == 0
    captured = capsys.readouterr()
    assert "refused: prompt_ids[1] = 9223372036854775808 does not fit the column's int64" in captured.err
    assert "1 row(s) from 1 rollout(s)" in captured.out and "1 row(s) refused" in captured.out
    assert [row["prompt_ids"] for row in read_parquet(path)] == [[1, 2]]
