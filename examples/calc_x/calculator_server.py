"""A calculator as an MCP tool server over stdio (run as its own process by `calc_agent.py`).

One tool, `calculate(expression)`, evaluates arithmetic safely: numbers, + - * / // % **, parentheses
and unary minus, parsed with `ast` (no `eval`). Errors come back as text the model can read.

Run it by hand to talk MCP over stdin/stdout:  python examples/calc_x/calculator_server.py
"""

from __future__ import annotations

import ast
import operator
from typing import Callable, Dict, Type, Union

from mcp.server.mcpserver import MCPServer

Number = Union[int, float]

_BINARY: Dict[Type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
MAX_EXPONENT = 64
MAX_LENGTH = 200


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; ValueError for anything else."""
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    return _value(tree.body)


def _value(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
    raise ValueError(f"unsupported element {ast.dump(node)[:40]}; use numbers, + - * / // % ** and parentheses")


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.6g}" if isinstance(value, float) else str(value)


server = MCPServer("calculator", instructions="Exact arithmetic for word problems.")


@server.tool(description="Evaluate an arithmetic expression such as '(12 + 7) * 3' and return the result.")
def calculate(expression: str) -> str:
    try:
        return format_number(evaluate(expression))
    except ValueError as exc:
        return f"error: {exc}"


if __name__ == "__main__":
    server.run("stdio")
