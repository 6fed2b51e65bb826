"""`agentlightning.instrumentation.vllm` against a stand-in `vllm` package on sys.path.

vLLM itself needs a GPU build; the stand-in has the two things the instrumentation touches: the package
version and the pydantic request model at `vllm.entrypoints.openai.protocol.ChatCompletionRequest`.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlightning.instrumentation import vllm as vllm_instrumentation


def _write_fake_vllm(root: Path, version: str, with_field: bool = True) -> None:
    package = root / "vllm"
    (package / "entrypoints" / "openai").mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "entrypoints" / "__init__.py").write_text("")
    (package / "entrypoints" / "openai" / "__init__.py").write_text("")
    field = "    return_token_ids: Optional[bool] = None\n" if with_field else ""
    (package / "entrypoints" / "openai" / "protocol.py").write_text(
        textwrap.dedent(
            """
            from typing import Any, Optional
            from pydantic import BaseModel

            class ChatCompletionRequest(BaseModel):
                model: str
                messages: list[Any]
            """
        )
        + field
    )


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    vllm_instrumentation.uninstrument_vllm()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def test_instrument_vllm_defaults_return_token_ids_and_uninstrument_restores(fake_vllm: Path) -> None:
    _write_fake_vllm(fake_vllm, "0.11.0")
    from vllm.entrypoints.openai.protocol import ChatCompletionRequest  # type: ignore[import-not-found]

    assert ChatCompletionRequest(model="m", messages=[]).return_token_ids is None
    assert vllm_instrumentation.instrument_vllm() is True
    assert vllm_instrumentation.instrument_vllm() is False  # idempotent
    assert vllm_instrumentation.is_vllm_instrumented()
    assert ChatCompletionRequest(model="m", messages=[]).return_token_ids is True
    assert ChatCompletionRequest(model="m", messages=[], return_token_ids=False).return_token_ids is False

    assert vllm_instrumentation.uninstrument_vllm() is True
    assert vllm_instrumentation.uninstrument_vllm() is False
    assert ChatCompletionRequest(model="m", messages=[]).return_token_ids is None


def test_old_vllm_is_refused_with_the_version_needed(fake_vllm: Path) -> None:
    _write_fake_vllm(fake_vllm, "0.9.1", with_field=False)
    with pytest.raises(ImportError, match=r"vLLM 0\.9\.1 .*>= 0\.10\.2"):
        vllm_instrumentation.instrument_vllm()
    assert not vllm_instrumentation.is_vllm_instrumented()


def test_missing_vllm_raises_import_error_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"vllm>=0\.10\.2"):
        vllm_instrumentation.instrument_vllm()
