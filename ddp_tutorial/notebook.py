"""The first cell of every notebook: which language, which data set, which data root.

``notebook.setup()`` takes the language from the notebook's folder (``tr/`` → Turkish, ``en/`` →
English; else ``DDP_TUTORIAL_LANG``) and sets ``DDP_TUTORIAL_LANG`` for everything the notebook
starts afterwards (engines, jobs). The data root is shown as ``$DDP_TUTORIAL_ROOT`` when that
variable sets it, so stored outputs carry no machine's paths. No torch import: it also chooses the
kernel's OpenMP wait policy before torch is imported (:func:`ddp_tutorial.threads.prefer_passive_openmp`),
since 01 trains in the kernel itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import collector
from .datasets import ROOT_VARIABLE, default_dataset, default_root
from .i18n import LANG_VARIABLE, LANGUAGES, language, t
from .threads import prefer_passive_openmp


def setup(quiet: bool = False) -> dict:
    """Language, data set and data root of this notebook; prints one line saying them."""
    folder = Path.cwd().name
    if folder in LANGUAGES:
        os.environ[LANG_VARIABLE] = folder
    root = default_root()
    shown = f"${ROOT_VARIABLE}" if os.environ.get(ROOT_VARIABLE) else "~/" + str(
        root.relative_to(Path.home())) if root.is_relative_to(Path.home()) else str(root)
    info = {"lang": language(), "dataset": default_dataset(), "root": str(root), "root_shown": shown}
    # The kernel is a training process too (01 trains in it): on a busy machine (a class on one node) its
    # OpenMP threads must sleep, not spin, while they wait, as the engines' do. OpenMP reads the policy once,
    # when torch is imported, and the first cell runs before any import of torch; the engines inherit it.
    prefer_passive_openmp()
    install_error_display()
    pause_collector_until_torch()
    if not quiet:
        print(t("ipp.notebook", language=info["lang"], dataset=info["dataset"], root=shown))
    return info


def pause_collector_until_torch() -> bool:
    """In a Jupyter kernel that has not imported torch yet: each cell runs with CPython's cycle collector off
    until a cell has imported torch, and what the cell made is frozen after it (:mod:`ddp_tutorial.collector`:
    the collector would walk torch's 300 000 objects again and again while they are made, then at each full
    collection for the rest of the kernel's life). True when the two cell events are registered."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or "torch" in sys.modules:
        return False

    def before(info=None):
        collector.pause()

    def after(result=None):
        collector.resume()
        if "torch" in sys.modules:
            shell.events.unregister("pre_run_cell", before)
            shell.events.unregister("post_run_cell", after)

    shell.events.register("pre_run_cell", before)
    shell.events.register("post_run_cell", after)
    return True


def _user_frames_only(tb):
    """The traceback without the frames of this package, torch and ipyparallel: what is left is
    the attendee's own cell (and code they wrote), which is where the fix belongs."""
    package = str(Path(__file__).resolve().parent)
    hidden = (package, os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python")
    kept = []
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not any(h in name for h in hidden):
            kept.append(tb)
        tb = tb.tb_next
    for earlier, later in zip(kept, kept[1:]):
        earlier.tb_next = later
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def _show_user_error(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for :class:`~ddp_tutorial.i18n.TutorialError`: the attendee's cell line and
    our message, no frames from inside the package."""
    stb = shell.InteractiveTB.structured_traceback(etype, value, _user_frames_only(tb), tb_offset=tb_offset)
    shell._showtraceback(etype, value, stb)
    return stb


def install_error_display() -> bool:
    """In a Jupyter kernel, show our errors as the attendee's cell + our message (True when done)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    from .i18n import TutorialError
    shell.set_custom_exc((TutorialError,), _show_user_error)
    return True
