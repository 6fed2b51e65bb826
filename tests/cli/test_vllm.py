"""`agl vllm`: argument forwarding, version checks and errors, on CPU with a stand-in `vllm` package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning.cli import main as agl_main
from agentlightning.cli import vllm as vllm_cli

FORWARDED = [
    "serve",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "--port",
    "8000",
    "--max-model-len",
    "4096",
    "--enable-auto-tool-choice",
]


def fake_vllm(root: Path, version: str) -> Path:
    """A minimal installed `vllm` whose CLI entry point records the arguments it received."""
    package = root / "vllm"
    (package / "entrypoints" / "cli").mkdir(parents=True)
    for directory in (package, package / "entrypoints", package / "entrypoints" / "cli"):
        (directory / "__init__.py").write_text("")
    (package / "entrypoints" / "cli" / "main.py").write_text(
        "import json, os, sys\nwith open(os.environ['FAKE_VLLM_ARGS'], 'w') as f:\n    json.dump(sys.argv[1:], f)\n"
    )
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


@pytest.fixture
def not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behave as on a machine without vLLM, whatever this one has."""
    monkeypatch.setattr(vllm_cli, "installed_vllm_version", lambda: None)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(version: str) -> None:
        monkeypatch.syspath_prepend(str(fake_vllm(tmp_path / version, version)))

    return install


def test_dry_run_prints_the_forwarded_command(capsys: pytest.CaptureFixture[str], installed):
    installed("0.11.0")
    assert agl_main(["vllm", "--dry-run", *FORWARDED]) == 0
    assert capsys.readouterr().out.split() == [sys.executable, "-m", "vllm.entrypoints.cli.main", *FORWARDED]


@pytest.mark.usefixtures("not_installed")
def test_dry_run_without_vllm_still_prints_and_notes_the_install(capsys: pytest.CaptureFixture[str]):
    assert vllm_cli.main([*FORWARDED, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split()[-len(FORWARDED) :] == FORWARDED
    assert "vLLM is not installed here; pip install 'agentlightning[verl]'" in captured.err


@pytest.mark.usefixtures("not_installed")
def test_missing_vllm_is_a_clear_error(capsys: pytest.CaptureFixture[str]):
    ran: list[list[str]] = []
    assert vllm_cli.main(FORWARDED, run=ran.append) == 1
    assert ran == []
    assert "vLLM is not installed; pip install 'agentlightning[verl]' (or pip install 'vllm>=0.10.2')" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0rc1", "0.12.1.dev5+g1234"])
def test_recent_vllm_runs_the_command_untouched(version: str, installed):
    installed(version)
    ran: list[list[str]] = []
    assert vllm_cli.main(FORWARDED, run=ran.append) == 0
    assert ran == [[sys.executable, "-m", "vllm.entrypoints.cli.main", *FORWARDED]]


def test_vllm_too_old_for_token_ids_is_refused_for_serve(capsys: pytest.CaptureFixture[str], installed):
    installed("0.9.2")
    ran: list[list[str]] = []
    assert vllm_cli.main(FORWARDED, run=ran.append) == 1
    assert "vLLM 0.9.2 cannot return token ids per request (needs >= 0.10.2)" in capsys.readouterr().err
    assert vllm_cli.main(["--version"], run=ran.append) == 0  # other vLLM commands are forwarded as they are
    assert ran == [[sys.executable, "-m", "vllm.entrypoints.cli.main", "--version"]]


def test_help(capsys: pytest.CaptureFixture[str]):
    assert vllm_cli.main(["--help"]) == 0
    assert "usage: agl vllm" in capsys.readouterr().out
    assert vllm_cli.main([]) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.10.2", (0, 10, 2)), ("0.11.0rc1", (0, 11, 0)), ("0.8.5.post1", (0, 8, 5)), ("1.0", (1, 0))],
)
def test_parse_version(text: str, expected: tuple[int, ...]):
    assert vllm_cli.parse_version(text) == expected


def test_parse_version_rejects_garbage():
    with pytest.raises(ValueError, match="cannot read a version number from 'main'"):
        vllm_cli.parse_version("main")


def test_agl_vllm_serve_hands_every_argument_to_vllm(tmp_path: Path):
    """End to end: the real `agl` process replaces itself with vLLM's CLI entry point."""
    root = fake_vllm(tmp_path / "site", "0.11.0")
    record = tmp_path / "argv.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.getcwd()]), "FAKE_VLLM_ARGS": str(record)}
    completed = subprocess.run(
        [sys.executable, "-m", "agentlightning.cli", "vllm", *FORWARDED],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(record.read_text()) == FORWARDED
