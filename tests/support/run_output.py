"""Reading a training script's console output without depending on how fast the machine ran it.

A run prints a progress line every `PROGRESS_INTERVAL_SECONDS` (to stderr) while its algorithm waits, so a
slow or loaded machine prints some before the summary; tests find lines by what they say, not by position.
"""

from __future__ import annotations

import re

__all__ = ["PROGRESS_LINE", "summary_line", "without_progress"]

PROGRESS_LINE = re.compile(r"^agentlightning: (\d+ s|\d+ min \d{2} s|\d+ h \d{2} min): ")
"""`agentlightning: 21 s: train 0/2 done; ...` (trainer/progress.py's `RunProgress.line`)."""


def without_progress(lines: list[str]) -> list[str]:
    return [line for line in lines if not PROGRESS_LINE.match(line)]


def summary_line(lines: list[str]) -> str:
    """The run's one summary line (`agentlightning: finished in ...`), wherever it is among the others."""
    (summary,) = [line for line in lines if line.startswith("agentlightning: finished in ")]
    return summary
