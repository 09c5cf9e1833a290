"""A progress bar over datasets: done, failed and running counts, on stderr."""

from __future__ import annotations


class FitProgress:
    """``with FitProgress(total, enabled) as p: p.started(); p.finished(ok)`` — a rich bar when enabled."""

    def __init__(self, total: int, enabled: bool = True, label: str = "fits"):
        self.total, self.enabled, self.label = total, enabled, label
        self.done = self.failed = self.running = 0
        self._progress = self._task = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task(self._text(), total=self.total)
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._update()
            self._progress.stop()

    def _text(self) -> str:
        return f"done {self.done} · failed {self.failed} · running {self.running}"

    def _update(self):
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done + self.failed, description=self._text())

    def running_now(self, n: int) -> None:
        self.running = n
        self._update()

    def finished(self, ok: bool, running: int | None = None) -> None:
        if running is not None:
            self.running = running
        if ok:
            self.done += 1
        else:
            self.failed += 1
        self._update()
