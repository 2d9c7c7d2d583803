"""What the notebook shows while it waits: engines registering, and rank 0's progress bar.

In a live Jupyter kernel the engine count updates one line in place and training draws a
``tqdm.auto`` bar (ipywidgets); in a script or pytest the count comes as a line every few seconds;
in a kernel nobody watches (``DDP_TUTORIAL_UNWATCHED`` set: nbval's kernels, the notebooks' build) the
count is not shown at all, so that a checked cell's output does not depend on how long the engines took
(a loaded machine); the bar
is tqdm's text form without timings wherever there is no live kernel, so stored outputs stay stable.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Optional

from ..i18n import t

UNWATCHED = "DDP_TUTORIAL_UNWATCHED"  # set for the kernels nbval and the notebooks' build run (no front end)
TEXT_EVERY = 5.0  # seconds between the engine-count lines outside a live kernel
TICK = 0.5        # seconds between updates of the in-place line


def live_kernel() -> bool:
    """Is this a Jupyter kernel with a front end to draw in (not CI)?"""
    return not os.environ.get("CI") and in_kernel()


def in_kernel() -> bool:
    """Is this a Jupyter kernel, live or run by nbval / nbclient?"""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Registering:
    """``with Registering(n, count):`` shows how many of ``n`` engines have registered (``count()``)
    and for how long, until the block ends: in place in a live kernel, as a line every ``TEXT_EVERY``
    seconds in a script or a kernel under CI, not at all in a kernel nobody watches (nbval's: its output
    is checked)."""

    def __init__(self, n: int, count: Callable[[], int]):
        self.n, self.count = n, count
        self.began = time.monotonic()
        self.done = threading.Event()
        self.handle = None
        self.lines = not (in_kernel() and os.environ.get(UNWATCHED))
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def text(self) -> str:
        try:
            got = self.count()
        except Exception:  # noqa: BLE001 - no client yet, or it is being closed
            got = 0
        return t("ipp.registering_local", got=got, n=self.n, seconds=time.monotonic() - self.began)

    def _tick(self) -> None:
        last_line = self.began
        while not self.done.wait(TICK):
            now = time.monotonic()
            if self.handle is not None:
                self.handle.update({"text/plain": self.text()}, raw=True)
            elif self.lines and now - last_line >= TEXT_EVERY:
                last_line = now
                print(self.text(), flush=True)

    def __enter__(self) -> "Registering":
        if live_kernel():
            from IPython.display import display
            self.handle = display({"text/plain": self.text()}, raw=True, display_id=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        if self.handle is not None:  # the stored output: the count, no timing
            self.handle.update({"text/plain": t("ipp.registered", got=self.count(), n=self.n)}, raw=True)


class RankZeroBar:
    """The kernel's drawing of rank 0's bars, fed with what rank 0 published: the history of the
    call's bars (``{"bars": [[desc, done, total], …]}``), so that a bar that began and ended between
    two looks is still drawn, with the count it ended at."""

    def __init__(self):
        self.bar = None
        self.index = -1        # which of the published bars self.bar draws
        self.widgets = live_kernel()

    def _new(self, desc: str, total: int):
        if self.widgets:
            try:
                import ipywidgets  # noqa: F401 - tqdm.auto needs it for the widget form
                from tqdm.auto import tqdm
                return tqdm(total=total, desc=desc, unit=t("train.progress_unit"))
            except ImportError:
                pass
        from tqdm.std import tqdm
        return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0,
                    bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt}")

    def show(self, published: Optional[dict]) -> None:
        bars = (published or {}).get("bars") or []
        for index in range(max(self.index, 0), len(bars)):
            desc, done, total = bars[index]
            if index != self.index:  # the bar before it is over: it ended at the count it published
                self.close()
                self.index, self.bar = index, self._new(desc, total)
            if done > self.bar.n:
                self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
