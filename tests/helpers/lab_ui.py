"""JupyterLab in Chromium (playwright): the clicks the browser tests share.

*Run → Run All Cells* clicked while JupyterLab is still busy (a loaded machine: the notebook open but its
commands not yet enabled) can do nothing: every prompt stayed ``[ ]:`` for the whole budget in a clean-clone
run with three pytest workers. So the click is checked: some cell must be queued, running or done (``[*]:``
or ``[1]:``) within ``confirm`` seconds, else the menu is clicked again; a Run All that took effect is never
repeated (all prompts are ``[ ]:`` until one runs)."""

from __future__ import annotations

import re
import time


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def prompts(panel) -> list:
    return panel.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents()


def run_all(page, panel, confirm: float = 30, tries: int = 3) -> float:
    """Run → Run All Cells until it takes effect; the monotonic time of the click that did."""
    for attempt in range(1, tries + 1):
        page.keyboard.press("Escape")  # a menu left open by a click that missed
        menu(page, "Run", "Run All Cells")
        clicked = time.monotonic()
        while time.monotonic() - clicked < confirm:
            if any(re.search(r"[*\d]", p) for p in prompts(panel)):
                return clicked
            page.wait_for_timeout(250)
        print(f"Run All Cells: no cell queued {confirm:.0f} s after click {attempt}; clicking again")
    raise AssertionError(f"Run All Cells did nothing in {tries} clicks (prompts {prompts(panel)})")
