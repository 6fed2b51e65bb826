"""The calculator agent: a multi-turn arithmetic solver with one tool, and its verifiable reward.

Each task is a question such as "What is 37 * 18?" with its exact integer answer. The agent asks the
policy LLM (through the OpenAI client, offering a `calculator` tool); when the model calls the tool the
agent evaluates the expression safely, sends the result back as a tool message, and asks again. The
first reply without a tool call is the final answer, graded by `grade` (1.0 only for the exact answer).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypedDict

from openai import AsyncOpenAI

import agentlightning as agl

__all__ = [
    "CalcTask",
    "Episode",
    "SYSTEM_PROMPT",
    "EXAMPLES",
    "TOOLS",
    "DATA_DIR",
    "load_tasks",
    "safe_eval",
    "final_number",
    "grade",
    "solve",
    "calculator_agent",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
MAX_LLM_CALLS = 3
"""Tool round-trips per task: call, (call again,) answer."""


class CalcTask(TypedDict):
    """One arithmetic question and its exact answer."""

    id: str
    question: str
    answer: int


SYSTEM_PROMPT = "Use the calculator tool, then reply with just the number."


def _worked_example(question: str, expression: str, result: int, call_id: str) -> List[Dict[str, Any]]:
    call = {"name": "calculator", "arguments": json.dumps({"expression": expression})}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": call}]},
        {"role": "tool", "tool_call_id": call_id, "content": str(result)},
        {"role": "assistant", "content": str(result)},
    ]


EXAMPLES: List[Dict[str, Any]] = [
    {"role": "user", "content": "What is 12 * 7?"},
    {"role": "assistant", "content": "84"},
    *_worked_example("Compute 305 minus 118.", "305 - 118", 187, "call_1"),
]
"""Two earlier chat turns: an easy "What is ...?" answered from memory, and a "Compute ..." solved with the
tool. The untrained model copies the habit by phrasing: decoding greedily it answers "What is ...?"
questions (most tasks) from memory - wrong for three-digit products - and uses the tool for "Compute ...".
GRPO has to teach it to use the calculator whatever the phrasing."""

TOOLS: List[Dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]

_OPERATORS: Dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def load_tasks(split: str, data_dir: Path = DATA_DIR) -> List[CalcTask]:
    """The tasks of `<data_dir>/<split>.jsonl` (split: "train" or "val")."""
    path = data_dir / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; regenerate it with: python examples/grpo_calculator/make_data.py")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _eval_node(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_eval_node(node.left), _eval_node(node.right))
    raise ValueError(f"unsupported element {type(node).__name__}")


def safe_eval(expression: str) -> Optional[float]:
    """The value of an arithmetic expression (numbers, + - * /, parentheses), or None when it is not one."""
    text = expression.replace("x", "*").replace("×", "*").replace("÷", "/").strip()
    if not text or len(text) > 80:
        return None
    try:
        return float(_eval_node(ast.parse(text, mode="eval")))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _format_number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.4g}"


def final_number(text: Optional[str]) -> Optional[float]:
    """The last number in a reply ("The answer is 1,234." -> 1234.0), or None."""
    matches = _NUMBER_RE.findall(text or "")
    if not matches:
        return None
    try:
        return float(matches[-1].replace(",", ""))
    except ValueError:
        return None


@dataclass
class Episode:
    """What happened in one rollout: the tool calls with their results, and the final reply."""

    tool_results: List[Optional[float]] = field(default_factory=lambda: [])
    final_text: Optional[str] = None
    llm_calls: int = 0

    @property
    def attempted_tool(self) -> bool:
        """Whether the model tried the tool: a call (valid or not), or a `<tool_call>` it did not finish."""
        return bool(self.tool_results) or "<tool_call>" in (self.final_text or "")


def grade(task: CalcTask, episode: Episode) -> float:
    """1.0 for the exact answer; otherwise partial credit for the right steps (always < 1.0).

    - 0.5: the calculator was called with an expression whose value is the answer, but the reply is wrong;
    - 0.2: the calculator was called with a valid expression (another value);
    - 0.15: the model tried a tool call, but it was not valid (a format reward: it makes the first, mostly
      malformed, attempts of the untrained model score above answering from memory, so GRPO has something
      to reinforce before a valid call is ever sampled);
    - 0.1: no tool call, but the reply contains a number;
    - 0.0: nothing usable.
    """
    answer = float(task["answer"])
    reply = final_number(episode.final_text)
    if reply is not None and abs(reply - answer) < 1e-6:
        return 1.0
    valid = [r for r in episode.tool_results if r is not None]
    if any(abs(r - answer) < 1e-6 for r in valid):
        return 0.5
    if valid:
        return 0.2
    if episode.attempted_tool:
        return 0.15
    return 0.1 if reply is not None else 0.0


async def solve(task: CalcTask, client: AsyncOpenAI, model: str, sampling: Dict[str, Any]) -> Episode:
    """Run the tool loop for one task and return the episode (the caller grades it)."""
    messages: List[Dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        *EXAMPLES,
        {"role": "user", "content": task["question"]},
    ]
    episode = Episode()
    for _ in range(MAX_LLM_CALLS):
        response = await client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            **sampling,
        )
        episode.llm_calls += 1
        message = response.choices[0].message
        calls = [c for c in (message.tool_calls or []) if c.type == "function"]
        if not calls:
            episode.final_text = message.content or ""
            return episode
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            result = _run_tool(call.function.name, call.function.arguments)
            episode.tool_results.append(result)
            content = (
                "error: use calculator with an arithmetic expression" if result is None else _format_number(result)
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return episode


def _run_tool(name: str, arguments: str) -> Optional[float]:
    """The value of a calculator call, or None when the call is not one.

    The agent has one tool, so it is lenient the way a forgiving tool layer is: a call under another name
    ("math", "calc") or with its one argument under another key ({"operation": "12 * 7"}) still runs the
    calculator, provided that argument is an arithmetic expression (a string, or a bare number).
    """
    del name  # the only tool
    try:
        parsed: Any = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not parsed:
        return None
    values: List[Any] = list(parsed.values())  # type: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    expression = parsed.get("expression", values[0] if len(values) == 1 else None)  # type: ignore[reportUnknownMemberType]
    if isinstance(expression, bool) or not isinstance(expression, (str, int, float)):
        return None
    return safe_eval(str(expression))


@agl.rollout
async def calculator_agent(task: CalcTask, llm: agl.LLM) -> float:
    """One rollout: solve the task with the published policy LLM; the grade is the reward."""
    # The policy server holds calls during a weight swap (async training); retries cover transient errors.
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=5, timeout=300)
    sampling = {k: v for k, v in llm.sampling_parameters.items() if k in ("temperature", "max_tokens", "top_p")}
    episode = await solve(task, client, llm.model, sampling)
    return grade(task, episode)


def stand_in_model(request: Dict[str, Any]) -> Any:
    """An offline stand-in policy for this task's framework ports (examples/autogen_calc, pydantic_ai_calc):
    call `calculator` with the last question's product, then answer with the tool's result."""
    messages = request["messages"]
    last = messages[-1]
    if last.get("role") == "tool":
        return str(last.get("content"))
    question = next(str(m["content"]) for m in reversed(messages) if m.get("role") == "user")
    a, b = re.findall(r"\d+", question)[:2]
    return {"content": "", "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}]}


def describe_rollout(question: Any, details: Dict[str, Any], reward: Optional[float]) -> str:
    """One evaluated rollout of a framework port, as its evaluation script prints it."""
    return f"{question} tool results {details.get('tool_results')} reply={str(details.get('reply'))[:30]!r} reward={reward}"
