"""A tracer never imports LiteLLM or the Anthropic SDK itself, but instruments them as soon as the agent does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("anthropic", reason="needs the anthropic extra")
pytestmark = pytest.mark.slow  # a fresh interpreter importing agentlightning and anthropic

SCRIPT = textwrap.dedent(
    """
    import sys
    from agentlightning.store.memory import InMemoryLightningStore
    from agentlightning.tracer.otel import OtelTracer
    from agentlightning.instrumentation import instrument_llm_clients

    tracer = OtelTracer()
    tracer.init_worker(0, InMemoryLightningStore())
    instrument_llm_clients()
    assert "anthropic" not in sys.modules, "the tracer imported anthropic itself"
    assert "litellm" not in sys.modules, "the tracer imported litellm itself"
    import anthropic
    from agentlightning.instrumentation.anthropic import is_anthropic_instrumented
    assert is_anthropic_instrumented(), "anthropic was not instrumented on import"
    assert hasattr(anthropic.resources.messages.Messages.create, "__agentlightning_anthropic_original__")
    print("ok")
    """
)


def test_anthropic_is_instrumented_when_the_agent_imports_it() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
