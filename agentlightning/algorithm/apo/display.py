"""What APO shows on the console: a progress bar per round, a table of the round's candidates, the final best."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .report import RoundRecord

__all__ = ["APODisplay"]

_PREVIEW_CHARS = 70


def _preview(template: str) -> str:
    flat = " ".join(template.split())
    return flat if len(flat) <= _PREVIEW_CHARS else flat[: _PREVIEW_CHARS - 3] + "..."


def _score(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


class RoundProgress:
    """Advance a round's progress bar (a no-op when the display is disabled)."""

    def __init__(self, progress: Optional[Progress], task: Optional[TaskID]) -> None:
        self._progress = progress
        self._task = task

    def advance(self, description: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, description=escape(description))

    def set_total(self, steps: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=steps)


class APODisplay:
    """Rich console output for an APO run; `enabled=False` prints nothing (logging still happens)."""

    def __init__(self, console: Optional[Console] = None, *, enabled: bool = True) -> None:
        self.console = console or Console()
        self.enabled = enabled

    @contextmanager
    def round_progress(self, round_index: int, total_rounds: int, steps: int) -> Iterator[RoundProgress]:
        """A progress bar over a round's steps."""
        if not self.enabled:
            yield RoundProgress(None, None)
            return
        progress = Progress(
            TextColumn("[bold]APO round {task.fields[round]}[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        task = progress.add_task("starting", total=steps, round=f"{round_index}/{total_rounds}")
        with progress:
            yield RoundProgress(progress, task)
            progress.update(task, description="done")

    def seed(self, version: str, score: Optional[float], template: str) -> None:
        if self.enabled:
            self.console.print(
                f"[bold]APO seed prompt[/bold] {version}: full validation score {_score(score)} - "
                f"{escape(_preview(template))}"
            )

    def round_summary(self, record: RoundRecord, templates: dict[str, str]) -> None:
        if not self.enabled:
            return
        table = Table(title=f"APO round {record.round}: candidates on the validation batch", show_lines=False)
        table.add_column("version")
        table.add_column("parent")
        table.add_column("val batch", justify="right")
        table.add_column("beam")
        table.add_column("prompt")
        for candidate in sorted(record.candidates, key=lambda c: -c.val_batch_score):
            table.add_row(
                candidate.version + (" (new)" if candidate.new else ""),
                candidate.parent_version or "-",
                _score(candidate.val_batch_score),
                "kept" if candidate.kept else "dropped",
                Text(_preview(templates.get(candidate.version, ""))),
            )
        self.console.print(table)
        rejected = [b for b in record.branches if b.rejected_reason]
        for branch in rejected:
            self.console.print(
                f"  [yellow]rejected edit of {branch.parent_version}[/yellow]: {escape(branch.rejected_reason or '')}"
            )
        full = record.beam_best_full_val
        self.console.print(
            f"  beam best {record.beam_best_version}: full validation {_score(full.score if full else None)}; "
            f"best so far {record.best_version} ({_score(record.best_score)})"
            + (" [green]improved[/green]" if record.improved else "")
        )

    def final(self, version: str, score: Optional[float], template: str) -> None:
        if self.enabled:
            self.console.print(
                Panel(
                    Text(template), title=f"APO best prompt: {version}, validation score {_score(score)}", expand=False
                )
            )
