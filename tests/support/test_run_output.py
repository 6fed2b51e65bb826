"""The helpers that read a run's output by content find the summary after any number of progress lines."""

from __future__ import annotations

from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.trainer.progress import RunProgress
from agentlightning.trainer.run_store import RunStore
from tests.support.run_output import summary_line, without_progress

SUMMARY = "agentlightning: finished in 23.0 s; 2 rollouts: 2 succeeded, 0 failed"


def test_progress_lines_as_the_trainer_prints_them_are_recognised() -> None:
    progress = RunProgress(RunStore(InMemoryLightningStore(), "run"), algorithm_name="Baseline", clock=lambda: 0.0)
    slow = ["agentlightning: 3 min 05 s: train 0/2 done; 2 running, 0 queued", progress.line()]
    lines = [*slow, SUMMARY, "  mean reward: train 1.000 (2 rollouts)"]
    assert without_progress(lines) == [SUMMARY, "  mean reward: train 1.000 (2 rollouts)"]
    assert summary_line(lines) == SUMMARY
    assert without_progress(["agentlightning: interrupted after 21 s; stopped"]) != []
