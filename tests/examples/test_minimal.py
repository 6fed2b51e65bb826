"""`examples/minimal/`: the LLM proxy, metrics and vLLM launcher scripts run offline and print what they promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, expect_code: int = 0) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "minimal" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == expect_code, f"{script} {args}:\n{completed.stdout}\n{completed.stderr}"
    return completed


def test_llm_proxy_records_both_calls_with_token_ids_and_makes_triplets() -> None:
    out = run("llm_proxy.py").stdout
    assert re.search(r"proxy at http://127\.0\.0\.1:\d+", out)
    assert "A: What is 6 times 7?" in out  # the echo server repeats the question
    assert re.search(r"4 spans recorded for ro-[0-9a-f]{12}", out)  # each call with its raw request span
    assert re.findall(r"#(\d) raw_gen_ai_request", out) == ["1", "2"]
    counts = re.findall(r"#\d openai\.chat\.completion: (\d+) prompt ids, (\d+) response ids", out)
    assert len(counts) == 2 and all(int(p) > 0 and int(r) > 0 for p, r in counts)
    assert int(counts[1][0]) > int(counts[0][0])  # the second turn's prompt holds the first turn
    assert f"2 triplets: {counts[0][0]}+{counts[0][1]} tokens, {counts[1][0]}+{counts[1][1]} tokens" in out


def test_write_metrics_shows_the_same_numbers_on_console_and_prometheus() -> None:
    out = run("write_metrics.py", "--rollouts", "5").stdout
    assert "example.tasks.total{kind=demo} = 5" in out
    assert "agl.rollouts.total{method=enqueue_many_rollouts,status=ok} = 5" in out
    assert "agl.http.total{method=POST,path=/v1/agl/queues/rollouts/enqueue,status=201} = 5" in out
    assert 'example_tasks_total{kind="demo"} 5.0' in out
    assert 'example_task_seconds_count{kind="demo"} 5.0' in out
    assert "--rollouts must be >= 1" in run("write_metrics.py", "--rollouts", "0", expect_code=2).stderr


def test_vllm_server_checks_arguments_and_explains_a_missing_vllm() -> None:
    dry = run("vllm_server.py", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--port", "8123", "--dry-run")
    command = dry.stdout.strip()
    assert (
        command.startswith(sys.executable)
        and "-m vllm.entrypoints.cli.main serve Qwen/Qwen2.5-0.5B-Instruct" in command
    )
    assert "--port 8123 --gpu-memory-utilization 0.8 --max-model-len 4096" in command
    bad = run("vllm_server.py", "--model", "m", "--gpu-memory-utilization", "1.5", expect_code=2)
    assert "--gpu-memory-utilization must be in (0, 1], got 1.5" in bad.stderr
    assert (
        "--max-model-len must be >= 16"
        in run("vllm_server.py", "--model", "m", "--max-model-len", "8", expect_code=2).stderr
    )
    assert "--model" in run("vllm_server.py", expect_code=2).stderr
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        missing = run("vllm_server.py", "--model", "m", expect_code=1)
        assert "vLLM is not installed" in missing.stderr and "vllm>=0.10.2" in missing.stderr
        assert "vLLM is not installed here" in dry.stderr
