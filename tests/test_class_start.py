"""The class start (issue 49 P4): README and the instructor's kit start attendees the same way, with the class
environment AND the class's data root, so nothing is installed or downloaded per attendee; the lab's own
terminal has `ddp-tutorial`, `torchrun` and `python` of that environment on its PATH; README's "after the
workshop" line works in a class clone (which has no .venv) and in a checkout with its own .venv; and the
attendee's copy of the notebooks starts without the build's outputs.

The lab is started as README prints it, in a class clone (no .venv), with a fresh HOME whose ~/.bashrc puts
another `python` first (as a conda base does), and a real terminal of that JupyterLab is driven over its
websocket, as the browser drives it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
README = REPO / "README.md"
KIT = (REPO / "docs" / "instructor" / "README.md", REPO / "docs" / "instructor" / "README.tr.md")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("ddp-tutorial", "torchrun", "python")
LAB_SCRIPTS = ("lab.sh", "workshop_copy.sh", "python_check.sh", "site_login.sh", "lab_terminal.bashrc")


def class_lines(text: str) -> list:
    """Every command in ``text`` that starts the lab or its job with the class environment."""
    joined = re.sub(r"\\\n\s*", " ", text)  # a code block's continued lines as one
    inline = re.findall(r"`([^`\n]*DDP_TUTORIAL_VENV=[^`\n]*)`", joined)
    blocks = [line for line in joined.splitlines() if "`" not in line and "DDP_TUTORIAL_VENV=" in line]
    return [line for line in inline + blocks if "lab.sh" in line or "lab.sbatch" in line]


def after_workshop_line() -> str:
    """The first command of README's (English) "after the workshop" block: into the workshop copy, environment on."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^### After the workshop: your own script\n.*?```bash\n(.*?)```", text, re.S | re.M)
    assert block, "README.md has no bash block under '### After the workshop: your own script'"
    return next(line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#"))


def plain_env(home: Path, **more) -> dict:
    """A terminal's environment outside any lab: no DDP_TUTORIAL_* (but the tests' login-node pass), no
    venv on PATH, ``home`` as HOME."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DDP_TUTORIAL_") and k not in ("VIRTUAL_ENV", "OMP_WAIT_POLICY")}
    env.update(HOME=str(home), PATH=SYSTEM_PATH, SHELL="/bin/bash",
               DDP_TUTORIAL_LOGIN_OK=os.environ.get("DDP_TUTORIAL_LOGIN_OK", "1"), **more)
    return env


def class_clone(root: Path) -> Path:
    """A clone as an attendee has it in a class: the lab's scripts and the notebooks, no .venv."""
    (root / "scripts").mkdir(parents=True)
    for name in LAB_SCRIPTS:
        shutil.copy2(REPO / "scripts" / name, root / "scripts" / name)
    (root / "notebooks").mkdir()
    for part in ("en", "tr", "lab"):
        (root / "notebooks" / part).symlink_to(REPO / "notebooks" / part)
    (root / "ddp_tutorial").mkdir()
    (root / "ddp_tutorial" / "sites").symlink_to(REPO / "ddp_tutorial" / "sites")  # the login-node tables
    return root


def test_readme_and_the_kit_start_the_class_with_its_environment_and_its_data():
    """P4: README's class line omitted the class's data root (53 MB of MNIST fetched into every home, 66 s
    instead of 3 s); the kit's line had it. Every class start in both, both languages, names both."""
    for path in (README, *KIT):
        lines = class_lines(path.read_text(encoding="utf-8"))
        assert lines, f"{path.name}: no class start (DDP_TUTORIAL_VENV=… lab.sh / lab.sbatch) found"
        for line in lines:
            assert "DDP_TUTORIAL_ROOT=" in line, f"{path.relative_to(REPO)}: the class start has no data root: {line}"


@pytest.mark.parametrize("layout", ["class clone", "own .venv"])
def test_the_after_workshop_line_activates_the_environment(layout, tmp_path):
    """P4: README said `cd workshop/en && source ../../.venv/bin/activate`, and a class clone has no .venv.
    The line, run as written from the clone: the class environment (DDP_TUTORIAL_VENV, as the class
    started) or the checkout's own .venv; either way the three tools are that environment's."""
    line = after_workshop_line()
    root = tmp_path / "clone"
    (root / "workshop" / "en").mkdir(parents=True)
    more = {}
    if layout == "class clone":
        more["DDP_TUTORIAL_VENV"] = str(VENV)
    else:
        (root / ".venv").symlink_to(VENV)
    shown = "; ".join(f'echo "{tool} $(command -v {tool})"' for tool in TOOLS)
    done = subprocess.run(["bash", "-c", f"{line} && {shown}"], cwd=root, env=plain_env(tmp_path, **more),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"README's line failed in a {layout}: {line}\n{done.stderr}"
    found = dict(row.split(" ", 1) for row in done.stdout.splitlines())
    for tool in TOOLS:
        assert Path(found[tool]).parent.resolve() == (VENV / "bin").resolve(), (layout, tool, found)


def test_the_workshop_copy_starts_without_the_builds_outputs(tmp_path):
    """Issue 49 (smaller): the copy arrived with the author's outputs and [n] prompts (old pids, timings), so an
    attendee could not tell what they ran. The copy has none; the committed notebooks keep theirs (nbval)."""
    work = tmp_path / "workshop" / "en"
    done = subprocess.run(["bash", str(REPO / "scripts" / "workshop_copy.sh"), "en", str(work)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    stored = 0
    for source in sorted((REPO / "notebooks" / "en").glob("*.ipynb")):
        original = json.loads(source.read_text(encoding="utf-8"))
        copy = json.loads((work / source.name).read_text(encoding="utf-8"))
        stored += sum(bool(c.get("outputs")) for c in original["cells"] if c["cell_type"] == "code")
        code = [c for c in copy["cells"] if c["cell_type"] == "code"]
        assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), source.name
        assert [c["source"] for c in copy["cells"]] == [c["source"] for c in original["cells"]], source.name
        assert copy["metadata"] == original["metadata"], source.name
    assert stored > 20, "the committed notebooks should hold the build's outputs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(port: int, token: str, path: str, method: str = "GET") -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read()
    return json.loads(body) if body else {}


def _in_terminal(port: int, token: str, name: str, command: str, timeout: float = 60) -> str:
    """Type ``command`` into terminal ``name`` over its websocket (as the browser does); what it printed up to
    an end marker the shell computes (neither the echoed command line nor the output a new connection is
    replayed holds it)."""
    from tornado.websocket import websocket_connect

    tag = secrets.token_hex(4)

    async def talk() -> str:
        socket_ = await websocket_connect(f"ws://127.0.0.1:{port}/terminals/websocket/{name}?token={token}")
        await socket_.write_message(json.dumps(["stdin", f"{command}; echo END-$((6*7))-{tag}\r"]))
        printed, deadline = "", time.monotonic() + timeout
        while f"END-42-{tag}" not in printed:
            message = await asyncio.wait_for(socket_.read_message(), max(0.1, deadline - time.monotonic()))
            if message is None:
                break
            kind, *rest = json.loads(message)
            if kind == "stdout":
                printed += rest[0]
        socket_.close()
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed).replace("\r", "")  # a terminal's escapes and CRs

    return asyncio.run(talk())


def test_the_class_start_as_readme_says_gives_a_terminal_with_the_class_tools(mnist_root, tmp_path):
    """P4, end to end: README's class line, run in a class clone with a fresh HOME: no data staged into HOME
    (the class's data root is used), and in the lab's own terminal `ddp-tutorial`, `torchrun` and `python`
    are the class environment's, even after a ~/.bashrc that puts another python first (a conda base);
    README's "after the workshop" line then works there too. Before: `which ddp-tutorial torchrun python`
    printed nothing in that terminal."""
    readme = README.read_text(encoding="utf-8")
    line = next(m for m in re.findall(r"`(DDP_TUTORIAL_VENV=[^`]*bash scripts/lab\.sh en)`", readme))
    assert "DDP_TUTORIAL_ROOT=DATA" in line, f"README's class line names no data root: {line}"
    home = tmp_path / "home"
    decoy = home / "decoy" / "bin"
    decoy.mkdir(parents=True)
    (decoy / "python").write_text("#!/bin/sh\necho decoy\n")
    (decoy / "python").chmod(0o755)
    (home / ".bashrc").write_text('export PATH="$HOME/decoy/bin:$PATH"\n')
    clone = class_clone(tmp_path / "clone")
    port, token = _free_port(), secrets.token_hex(16)
    command = (line.replace("DIR", shlex.quote(str(VENV))).replace("DATA", shlex.quote(str(mnist_root)))
               + f" --no-browser --port {port} --ServerApp.port_retries=0 --IdentityProvider.token={token}")
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        lab = subprocess.Popen(["bash", "-c", command], cwd=clone, env=plain_env(home), stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    terminal = None
    try:
        deadline = time.monotonic() + 180
        while True:
            assert lab.poll() is None, f"the lab ended (code {lab.returncode}):\n{log.read_text()}"
            try:
                _api(port, token, "/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, f"the lab did not answer within 180 s:\n{log.read_text()}"
                time.sleep(0.5)
        started = log.read_text()
        assert "staging" not in started and not (home / "ddp-data").exists(), started  # nothing fetched into HOME
        terminal = _api(port, token, "/api/terminals", "POST")["name"]
        shown = "; ".join(f'echo "TOOL {tool} $(command -v {tool})"' for tool in TOOLS)
        printed = _in_terminal(port, token, terminal, shown)
        found = dict(re.findall(r"^TOOL (\S+) (\S*)$", printed, re.M))
        for tool in TOOLS:
            assert found.get(tool) == str(VENV / "bin" / tool), (tool, found, printed[-2000:])
        printed = _in_terminal(port, token, terminal, f"cd {shlex.quote(str(clone))} && {after_workshop_line()} "
                               "&& python -c 'import ddp_tutorial, sys; print(\"PREFIX\", sys.prefix)' && pwd")
        assert f"PREFIX {VENV}" in printed and str(clone / "workshop" / "en") in printed, printed[-2000:]
    finally:
        if terminal is not None:
            try:
                _api(port, token, f"/api/terminals/{terminal}", "DELETE")
            except OSError:
                pass
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait(timeout=30)
