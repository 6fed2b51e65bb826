"""A tiny calculator module with one bug for the agent to fix."""


def add(a: float, b: float) -> float:
    return a - b


def mul(a: float, b: float) -> float:
    return a * b
