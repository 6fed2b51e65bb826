"""Generate the arithmetic tasks shipped in `data/` (fixed seed, so the files are reproducible).

    python examples/grpo_calculator/make_data.py            # rewrites data/train.jsonl and data/val.jsonl

Questions are two-operand problems with two- and three-digit numbers (+, -, *), phrased a few ways;
the validation questions never appear in the training set.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Dict, List, Set, Tuple

DATA_DIR = Path(__file__).resolve().parent / "data"

_PHRASES = [
    "What is {a} {op} {b}?",
    "Compute {a} {op} {b}.",
    "Calculate {a} {op} {b}.",
    "What does {a} {op} {b} equal?",
]
_WORDS = {"+": "plus", "-": "minus", "*": "times"}


def _problem(rng: random.Random) -> Tuple[int, str, int]:
    op = rng.choice(["+", "-", "*"])
    if op == "*":
        return rng.randint(11, 99), op, rng.randint(11, 99)
    return rng.randint(100, 999), op, rng.randint(10, 999)


def make_tasks(count: int, rng: random.Random, seen: Set[Tuple[int, str, int]], prefix: str) -> List[Dict[str, object]]:
    """`count` distinct tasks not in `seen` (which is updated)."""
    tasks: List[Dict[str, object]] = []
    while len(tasks) < count:
        a, op, b = _problem(rng)
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        shown = _WORDS[op] if rng.random() < 0.25 else op
        question = rng.choice(_PHRASES).format(a=a, op=shown, b=b)
        tasks.append({"id": f"{prefix}-{len(tasks):03d}", "question": question, "answer": answer})
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=256, help="training tasks (default 256)")
    parser.add_argument("--val", type=int, default=32, help="held-out validation tasks (default 32)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help=f"output folder (default {DATA_DIR})")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen: Set[Tuple[int, str, int]] = set()
    val = make_tasks(args.val, rng, seen, "val")
    train = make_tasks(args.train, rng, seen, "train")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, tasks in (("train", train), ("val", val)):
        path = args.out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
        print(f"wrote {len(tasks)} tasks to {path}")


if __name__ == "__main__":
    main()
