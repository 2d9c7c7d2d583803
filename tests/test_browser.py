"""The attendee's JupyterLab in a real browser: Debian's Chromium driven by Playwright.

The lab is started exactly as the README says (``bash scripts/lab.sh tr`` / ``en``, plus
``--no-browser``, a free port and a token chosen here). Notebooks are opened by double-clicking them
in the file browser and run with *Run → Run All Cells*; then *Kernel → Shut Down Kernel*. Asserted:

- the printed URL lands on ``00_setup.ipynb``, and the lab's root holds only the attendee's notebooks;
- no error output except in the cells tagged ``raises-exception`` (04's rank that dies);
- every figure is rendered as a loaded image;
- the engine cell shows engine lines while it is still running (``[*]``), and training shows a
  progress display while it runs;
- after *Shut Down Kernel* no engine/controller process started by this lab is left within 10 s
  (found by a marker in their environment, so other users' engines do not count);
- the repository's notebooks are untouched (the lab serves a working copy; ``git status`` unchanged).

Screenshots go to ``tests/artifacts/browser/`` (git-ignored). Without Chromium or Playwright the test
is skipped with the reason, except under ``CI=true``, where it fails.

    .venv/bin/python -m pytest -q -m browser tests/test_browser.py
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddp_tutorial.whoami import find_free_port

import lab_ui

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ENGINE_WORDS = ("ipengine", "ipcontroller", "ipyparallel")
MARKER = "DDP_TUTORIAL_BROWSER_TEST"
# tqdm's line, as a widget's text ("epoch 0: 40% 5/12 [00:01<…") or as text ("40%|####  | 5/12 [00:01<…")
# tqdm's text form, with timings or without them (the package drops them where CI is set)
PROGRESS = re.compile(r"\d+%\|[^\n]{0,80}?\|[\s\u2007]*\d+/\d+")


def _need(what: str, reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is required under CI: {reason}")
    pytest.skip(f"{what}: {reason}")


def _playwright():
    if not os.access(CHROMIUM, os.X_OK):
        _need("chromium", f"{CHROMIUM} not found (apt-get install chromium fonts-dejavu-core)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright", "the Python package is not installed (pip install playwright)")
    return sync_playwright


def _marked_processes(marker: str) -> list[str]:
    """Engine/controller processes whose environment carries this lab's marker."""
    found = []
    needle = f"{MARKER}={marker}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            args += " " + Path(f"/proc/{pid}/comm").read_text().strip()  # a forked engine: the server's command line
            if not any(w in args for w in ENGINE_WORDS):
                continue
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z":
                    found.append(f"{pid} {args.strip()[:160]}")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def _repo_state(lang: str, name: str) -> tuple:
    """What the lab must not change: the whole ``git status`` when the checkout is clean (CI: a fresh
    clone), else (others' work in progress) the status and bytes of the notebook that is run."""
    def status(*paths):
        return subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout
    whole = status()
    notebook = REPO / "notebooks" / lang / name
    return (whole, None) if not whole else (status(str(notebook)), notebook.read_bytes())


class Lab:
    """``bash scripts/lab.sh <lang> --no-browser --port P --IdentityProvider.token=T``, in its own
    session, its working copy in a throw-away folder inside the checkout."""

    def __init__(self, lang: str, tmp: Path):
        self.lang, self.port, self.token = lang, find_free_port(), secrets.token_hex(16)
        self.marker = secrets.token_hex(8)
        self.work = REPO / "workshop" / f"browser-test-{self.marker}"
        self.log = tmp / f"lab-{lang}.log"
        # Its own IPython folder: no other test's ipyparallel cluster file reaches this JupyterLab (its
        # ipyparallel extension loads every cluster file of the profile at start).
        env = dict(os.environ, DDP_TUTORIAL_WORK=str(self.work), IPYTHONDIR=str(tmp / "ipython"),
                   **{MARKER: self.marker})
        env.pop("DDP_TUTORIAL_LANG", None)
        self.proc = subprocess.Popen(
            ["bash", "scripts/lab.sh", lang, "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={self.token}"],
            cwd=REPO, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def wait_url(self, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            m = re.search(r"(http://(?:127\.0\.0\.1|localhost):\d+/\S*)", text)
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise AssertionError(f"the lab printed no URL:\n{self.log.read_text(errors='replace')[-3000:]}")

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for line in _marked_processes(self.marker):  # none should be left; never outlive the test
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def _shot(page, name: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _run_notebook(page, name: str, lang: str, engine_cell: str, engine_line: str, train_cell: str | None,
                  lab: Lab, problems: list, budget: float):
    """Open ``name`` from the file browser, Run All, watch the engine/training cells while they run."""
    page.locator(".jp-DirListing-itemText", has_text=name).dblclick()
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Cell").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    began = lab_ui.run_all(page, panel)
    tag = f"{lang}-{name[:2]}"
    seen = {"engine_lines": False, "progress": False}
    shots, started, idle_polls = 0, False, 0
    last_text = {"engine_lines": None, "progress": None}  # what the cell showed while running

    def cell(text: str):
        return panel.locator(".jp-CodeCell").filter(has=page.locator(".jp-InputArea", has_text=text)).first

    while time.monotonic() - began < budget:
        prompts = lab_ui.prompts(panel)
        for key, code in (("engine_lines", engine_cell), ("progress", train_cell)):
            if code is None or seen[key]:
                continue
            c = cell(code)
            # text_content, not inner_text: JupyterLab skips rendering cells scrolled out of view
            if "*" not in (c.locator(".jp-InputPrompt").text_content() or ""):
                continue
            out = c.locator(".jp-OutputArea")
            text = (out.text_content() or "") if out.count() else ""
            last_text[key] = text
            if key == "engine_lines" and re.search(engine_line, text):
                seen[key] = True
                c.scroll_into_view_if_needed()
                _shot(page, f"{tag}-engine-lines-while-running")
            bar = out.locator(".widget-progress, progress, [role='progressbar']").count()
            if key == "progress" and (bar or PROGRESS.search(text)):
                seen[key] = True
                c.scroll_into_view_if_needed()
                _shot(page, f"{tag}-progress-while-training")
        busy = any("*" in p for p in prompts)
        started = started or busy
        idle_polls = 0 if busy else idle_polls + 1
        if started and idle_polls >= 5:  # done, or stopped at an error (the queued cells lose their [*])
            break
        if shots < 3 and time.monotonic() - began > 20 * (shots + 1):
            shots += 1
            _shot(page, f"{tag}-running-{shots}")
        page.wait_for_timeout(400)
    else:
        _shot(page, f"{tag}-timeout")
        problems.append(f"{tag}: Run All did not finish within {budget:.0f} s (prompts {lab_ui.prompts(panel)})")
    print(f"{tag}: Run All took {time.monotonic() - began:.0f} s")
    if not seen["engine_lines"]:
        problems.append(f"{tag}: no engine line ({engine_line}) in the cell `{engine_cell}` while it was "
                        f"running; it showed {last_text['engine_lines']!r:.300}")
    if train_cell and not seen["progress"]:
        problems.append(f"{tag}: no progress display in the cell `{train_cell}` while it was training; "
                        f"it showed {last_text['progress']!r:.300}")

    # Every figure rendered as a loaded image.
    images = panel.locator(".jp-RenderedImage img")
    for i in range(images.count()):
        ok = images.nth(i).evaluate("img => img.complete && img.naturalWidth > 0")
        if not ok:
            problems.append(f"{tag}: figure {i} is not rendered")
    _shot(page, f"{tag}-finished")

    page.keyboard.press("Control+s")  # save into the working copy (never the repository's notebook)
    try:  # an autosave that ran at the same moment makes JupyterLab ask; the open version is the newest
        page.locator(".jp-Dialog button", has_text=re.compile("Overwrite", re.I)).click(timeout=3000)
    except Exception:  # noqa: BLE001 - no dialog: the usual case
        pass
    page.wait_for_timeout(2000)
    saved = json.loads((lab.work / lang / name).read_text(encoding="utf-8"))
    figures = 0
    for c in saved["cells"]:
        if c["cell_type"] != "code":
            continue
        intended = "raises-exception" in c.get("metadata", {}).get("tags", [])
        errors = [o for o in c["outputs"] if o["output_type"] == "error"]
        if errors and not intended:
            problems.append(f"{tag}: unexpected error in `{''.join(c['source'])[:60]}`: "
                            f"{errors[0]['ename']}: {errors[0]['evalue'][:300]}")
        if intended and not errors:
            problems.append(f"{tag}: the intended error did not happen in `{''.join(c['source'])[:60]}`")
        figures += sum("image/png" in o.get("data", {}) for o in c["outputs"])
    if figures != images.count() or figures == 0 and name.startswith("04"):
        problems.append(f"{tag}: {figures} figure(s) stored but {images.count()} image(s) rendered")

    running = _marked_processes(lab.marker)
    if not running:
        problems.append(f"{tag}: no engine running before Shut Down Kernel: the check would prove nothing")
    lab_ui.menu(page, "Kernel", "Shut Down Kernel")
    dialog = page.locator(".jp-Dialog")
    try:  # a loaded machine may take seconds to show the confirmation: without the click nothing shuts down
        dialog.locator("button", has_text=re.compile("Shut Down", re.I)).click(timeout=8000)
    except Exception:  # noqa: BLE001 - no confirmation dialog in this JupyterLab version
        pass
    stopped = time.monotonic()  # the 10 s count from the confirmed shutdown
    left = _marked_processes(lab.marker)
    while left and time.monotonic() - stopped < 10:
        time.sleep(0.25)
        left = _marked_processes(lab.marker)
    gone_after = time.monotonic() - stopped
    print(f"{tag}: {len(running)} engine process(es) before Shut Down Kernel; "
          f"{len(left)} left after {gone_after:.1f} s")
    if left:
        problems.append(f"{tag}: engine processes left 10 s after Shut Down Kernel: {left}")
    _shot(page, f"{tag}-after-shutdown")


# (language, notebook, engine cell, what an engine line in it looks like, training cell or None,
#  edit to the working copy, seconds for Run All)
CASES = [
    ("tr", "03_collectives.ipynb", "engines = ipp.start(2)", r"\d+/2", None, None, 200),
    ("en", "04_ddp_training.ipynb", "results = ipp.train(config, n=N", r"\brank 0\b",
     "results = ipp.train(config, n=N", ("TrainConfig(epochs=2)", "TrainConfig(epochs=2, train_subset=25600)"), 200),
]


@pytest.mark.parametrize("lang,name,engine_cell,engine_line,train_cell,edit,budget", CASES, ids=["tr-03", "en-04"])
def test_lab_in_browser(lang, name, engine_cell, engine_line, train_cell, edit, budget, tmp_path):
    sync_playwright = _playwright()
    for old in ARTIFACTS.glob(f"{lang}-*.png"):  # this run's screenshots only
        old.unlink()
    before = _repo_state(lang, name)
    lab = Lab(lang, tmp_path)
    problems: list[str] = []
    try:
        url = lab.wait_url()
        printed = re.sub(r"token=[^&\s]*", f"token={lab.token}", url)
        assert "/lab/tree/00_setup.ipynb" in url, f"the printed URL does not open 00_setup: {url}"
        if edit:  # a subset keeps the test short: the attendee's own working copy, edited before opening
            path = lab.work / lang / name
            text = path.read_text(encoding="utf-8")
            assert json.dumps(edit[0])[1:-1] in text, f"{name} no longer has {edit[0]!r}"
            path.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")
        # The notebooks stop their own engines; a last cell starts two and leaves them running, so the
        # Shut Down Kernel check below has engines to find (else it could not fail).
        path = lab.work / lang / name
        notebook = json.loads(path.read_text(encoding="utf-8"))
        notebook["cells"].append({"cell_type": "code", "execution_count": None, "id": "browser-test-engines",
                                  "metadata": {}, "outputs": [],
                                  "source": "engines_left_running = ipp.start(2)"})
        path.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(printed)
                page.locator(".jp-DirListing-itemText").first.wait_for(timeout=90_000)
                tab = page.locator(".lm-DockPanel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
                tab.first.wait_for(timeout=60_000)
                page.wait_for_timeout(1500)
                _shot(page, f"{lang}-landing")
                assert tab.first.inner_text() == "00_setup.ipynb", "the lab did not open on 00_setup"
                listed = sorted(page.locator(".jp-DirListing-itemText").all_inner_texts())
                assert listed and all(n.endswith(".ipynb") for n in listed), f"lab root shows {listed}"
                assert "00_setup.ipynb" in listed and name in listed, listed
                news = page.locator(".jp-toast-message, .Toastify__toast", has_text=re.compile("news", re.I))
                assert news.count() == 0, "the news pop-up is shown"
                _run_notebook(page, name, lang, engine_cell, engine_line, train_cell, lab, problems, budget)
            finally:
                browser.close()
    finally:
        lab.close()
    print("\n".join(["problems:", *problems]) if problems else "no problems")
    assert not problems, "\n".join(problems)
    after = _repo_state(lang, name)
    assert after == before, f"the lab changed the repository (git status before/after):\n{before[0]}\n→\n{after[0]}"
