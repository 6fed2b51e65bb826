"""Placeholder checks that keep edited prompts compatible with the agent's `format()` call."""

from __future__ import annotations

import pytest

from agentlightning.algorithm.apo.placeholders import placeholder_problem, template_placeholders


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("Hello {name}, you are {age:>3} years", {"name", "age"}),
        ("{user.name} asks {items[0]}", {"user", "items"}),
        ("{value:{width}.{precision}f}", {"value", "width", "precision"}),
        ("Literal {{braces}} only", set()),
        ("no placeholders", set()),
    ],
)
def test_fstring_placeholders(template: str, names: set[str]) -> None:
    assert template_placeholders(template, "f-string") == names


def test_jinja_placeholders() -> None:
    template = "{% for r in rooms %}{{ r.name }}{% endfor %} for {{ user }} at {{ time | default('now') }}"
    assert template_placeholders(template, "jinja") == {"rooms", "user", "time"}


def test_invalid_templates_raise_value_error() -> None:
    with pytest.raises(ValueError, match="not a valid f-string template"):
        template_placeholders("Hello {name", "f-string")
    with pytest.raises(ValueError, match="not a valid jinja template"):
        template_placeholders("{% if x %}", "jinja")


def test_poml_is_not_inspected() -> None:
    assert template_placeholders("<poml>{{x}}</poml>", "poml") is None
    assert placeholder_problem("<poml/>", "<poml>other</poml>", "poml") is None


@pytest.mark.parametrize(
    ("candidate", "problem"),
    [
        ("Please answer {question} concisely.", None),
        ("Answer {question} twice: {question}", None),
        ("", "the edited prompt is empty"),
        ("  \n ", "the edited prompt is empty"),
        ("Answer the question.", "the edited prompt drops the placeholder(s) {question}"),
        (
            "Answer {question} for {user}",
            "the edited prompt adds unknown placeholder(s) {user}; the agent only fills {question}",
        ),
        ('Answer {question} as JSON {"a": 1}', 'the edited prompt adds unknown placeholder(s) {"a"}'),
        ("Answer {question} with a { brace", "the edited prompt is not a valid f-string template"),
    ],
)
def test_placeholder_problem_for_fstrings(candidate: str, problem: str | None) -> None:
    found = placeholder_problem("Answer {question}", candidate, "f-string")
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_placeholder_problem_for_jinja() -> None:
    original = "Book a room for {{ people }} people at {{ time }}"
    assert placeholder_problem(original, "At {{ time }}, {{ people }} people need a room.", "jinja") is None
    assert placeholder_problem(original, "At {{ time }} book a room.", "jinja") == (
        "the edited prompt drops the placeholder(s) {{ people }}"
    )
    problem = placeholder_problem(original, "{% if people %}", "jinja")
    assert problem is not None and problem.startswith("the edited prompt is not a valid jinja template")
