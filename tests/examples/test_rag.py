"""`examples/rag`: BM25 retrieval, the answer-F1 reward, and the `--quick` run through the whole stack."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "rag"))
from rag_agent import DATA, Retriever, answer_f1, load_jsonl  # noqa: E402


def test_every_reference_answer_is_in_the_passage_bm25_ranks_first() -> None:
    retriever = Retriever.from_corpus()
    for item in load_jsonl(DATA / "questions.jsonl"):
        top = retriever.search(item["question"], k=2)
        assert top, item["question"]
        assert any(item["answer"].lower() in p["text"].lower() for p in top), (item["question"], top)
    assert retriever.search("the of and") == []  # only stop words: nothing to match


def test_answer_f1_normalises_like_squad() -> None:
    assert answer_f1("The Morning Tern.", "Morning Tern") == 1.0
    assert answer_f1("Tobias", "Tobias Wren") == pytest.approx(2 / 3)
    assert answer_f1("no idea", "1871") == 0.0
    assert answer_f1("", "1871") == 0.0


@pytest.mark.slow
def test_quick_run_searches_then_answers_every_validation_question() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rag" / "train_rag.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    lines = re.findall(r"^  \[val\] (.+?) searches=\['(.+?)'\] answer=.* F1=([0-9.]+)$", out, flags=re.MULTILINE)
    assert len(lines) == 4 and all(question == search for question, search, _ in lines)
    assert "val answer F1: 0.161 over 4 questions" in out
