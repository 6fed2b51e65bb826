"""Write the word problems of `data/` (seeded, so the files are reproducible): `python examples/calc_x/make_data.py`.

Each problem needs two or three operations on two- and three-digit numbers: easy to set up, error-prone
to compute in one's head, exact with the calculator. Every item keeps the expression it was built from.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Dict, List, Tuple

DATA = Path(__file__).resolve().parent / "data"

Template = Callable[[random.Random], Tuple[str, str]]


def boxes(rng: random.Random) -> Tuple[str, str]:
    a, b, c = rng.randint(12, 48), rng.randint(13, 36), rng.randint(5, 90)
    return f"A shop has {a} boxes of {b} pens and {c} loose pens. How many pens does it have?", f"{a} * {b} + {c}"


def tickets(rng: random.Random) -> Tuple[str, str]:
    a, b, c = rng.randint(120, 480), rng.randint(11, 29), rng.randint(100, 900)
    return (
        f"A theatre sold {a} tickets at {b} dollars each and spent {c} dollars on the stage. What is its profit?",
        f"{a} * {b} - {c}",
    )


def sharing(rng: random.Random) -> Tuple[str, str]:
    per, people, extra = rng.randint(14, 63), rng.randint(12, 32), rng.randint(3, 40)
    total = per * people + extra
    return (
        f"{total} apples are shared equally among {people} children, and {extra} apples are left over. "
        f"How many apples does each child get?",
        f"({total} - {extra}) / {people}",
    )


def trips(rng: random.Random) -> Tuple[str, str]:
    a, b, c = rng.randint(23, 97), rng.randint(14, 45), rng.randint(2, 9)
    return f"A bus drives {a} km out and {b} km back, {c} times. How many km does it drive?", f"({a} + {b}) * {c}"


def savings(rng: random.Random) -> Tuple[str, str]:
    a, b, c = rng.randint(150, 900), rng.randint(35, 140), rng.randint(6, 18)
    return (
        f"Mia has {a} dollars and saves {b} dollars a week for {c} weeks. How many dollars does she have then?",
        f"{a} + {b} * {c}",
    )


TEMPLATES: List[Template] = [boxes, tickets, sharing, trips, savings]


def problems(n: int, seed: int) -> List[Dict[str, object]]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        question, expression = TEMPLATES[i % len(TEMPLATES)](rng)
        answer = eval(expression, {"__builtins__": {}})  # our own expressions: numbers and operators only
        items.append({"id": f"p{seed}-{i:03d}", "question": question, "expression": expression, "answer": int(answer)})
    return items


def main() -> None:
    DATA.mkdir(exist_ok=True)
    for name, n, seed in (("train", 60, 1), ("val", 15, 2)):
        with open(DATA / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for item in problems(n, seed):
                f.write(json.dumps(item) + "\n")
        print(f"wrote {n} problems to {DATA / f'{name}.jsonl'}")


if __name__ == "__main__":
    main()
