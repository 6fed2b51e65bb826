"""Generate the arithmetic tasks shipped in `data/` (fixed seed, so the files are reproducible).

    python examples/grpo_calculator/make_data.py            # rewrites data/train.jsonl and data/val.jsonl

Questions multiply a three-digit number by a two-digit one (too hard for a 135M model to do in its head),
phrased a few ways, mostly as "What is ...?" - the phrasing of the agent's worked example that answers
without the tool; the validation questions never appear in the training set.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Dict, List, Set, Tuple

DATA_DIR = Path(__file__).resolve().parent / "data"

_PHRASES = [
    ("What is {a} * {b}?", 0.4),
    ("What is {a} times {b}?", 0.3),
    ("What does {a} * {b} equal?", 0.15),
    ("Compute {a} * {b}.", 0.15),
]


def _problem(rng: random.Random) -> Tuple[int, str, int]:
    return rng.randint(101, 999), "*", rng.randint(11, 99)


def make_tasks(count: int, rng: random.Random, seen: Set[Tuple[int, str, int]], prefix: str) -> List[Dict[str, object]]:
    """`count` distinct tasks not in `seen` (which is updated)."""
    tasks: List[Dict[str, object]] = []
    while len(tasks) < count:
        a, op, b = _problem(rng)
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        answer = a * b
        phrase = rng.choices([p for p, _ in _PHRASES], weights=[w for _, w in _PHRASES])[0]
        question = phrase.format(a=a, b=b)
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
