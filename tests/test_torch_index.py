"""scripts/setup.sh when pip cannot install torch from its index (issue 49 P5): the instructor's exact
`setup.sh --site truba` ended in pip's raw `ResolutionImpossible` where download.pytorch.org could not be
reached, with no word of which index or what to do. Now one line, in the user's language, names the index,
why, and what to do (ddp_tutorial/torch_index.py asks the index itself).

setup.sh runs for real with a real pip, into a throw-away venv without torch that borrows this checkout's pip
(a .pth: nothing is installed, since nothing can be downloaded): the index is unreachable for real, either in a network
namespace of its own (TRUBA's index by name) or at a closed local port (--index-url). pip's own configuration
(this machine's local wheel folders) is switched off, so pip sees only the index setup.sh gives it."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

from ddp_tutorial import gpu, torch_index

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"
WORDS = {"en": "cannot be reached", "tr": "ulaşılamıyor"}


@pytest.fixture(scope="module")
def borrowed_venv(tmp_path_factory) -> Path:
    """A real venv without pip of its own and without torch: it borrows this checkout's pip (only pip) through
    a .pth, so setup.sh finds no torch and asks pip for it; ddp_tutorial comes from the checkout (setup.sh
    runs from there)."""
    folder = tmp_path_factory.mktemp("venv")
    venv, borrowed = folder / "v", folder / "borrowed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    borrowed.mkdir()
    (borrowed / "pip").symlink_to(Path(sysconfig.get_paths()["purelib"]) / "pip")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "borrowed.pth").write_text(f"{borrowed}\n")
    return venv


def setup_env(venv: Path, lang: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "DDP_TUTORIAL_")) and k not in ("VIRTUAL_ENV", "VENV")}
    env.update(VENV=str(venv), SKIP_SYSTEM="1", PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_TIMEOUT="5",
               PIP_DISABLE_PIP_VERSION_CHECK="1", DDP_TUTORIAL_LANG=lang)
    return env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on leaving: a connection there is refused


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("how", ["truba's index, no network", "--index-url at a closed port"])
def test_setup_names_the_unreachable_torch_index_and_what_to_do(borrowed_venv, how, lang):
    if how.startswith("truba"):
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("needs root and unshare (a network namespace without a network)")
        url = gpu.VARIANTS["cu126"].index_url
        args, wrap = ["--site", "truba"], ["unshare", "--net"]
    else:
        url = f"http://127.0.0.1:{_closed_port()}/whl/cu126"
        args, wrap = ["--site", "truba", "--index-url", url], []
    done = subprocess.run([*wrap, "bash", str(SETUP), *args], cwd=REPO, env=setup_env(borrowed_venv, lang),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("!! setup.sh: ") and url in last and WORDS[lang] in last, done.stderr[-3000:]
    assert f"bash scripts/setup.sh --site truba --index-url {'URL' if lang == 'en' else 'ADRES'}" in last, last
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    site = next((borrowed_venv / "lib").glob("python3*/site-packages"))
    assert sorted(p.name for p in site.iterdir()) == ["borrowed.pth"]  # nothing was installed


@pytest.fixture
def index(tmp_path):
    """A real PEP 503 index on a local port: ``write(listing)`` sets the links of its torch page."""
    folder = tmp_path / "index"
    (folder / "torch").mkdir(parents=True)

    def write(names):
        links = "".join(f'<a href="../../files/{n.replace("+", "%2B")}#sha256=0">{n}</a>\n' for n in names)
        (folder / "torch" / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")

    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", write
    finally:
        server.shutdown()
        server.server_close()


def test_an_index_that_answers_is_told_apart_from_one_that_cannot_be_reached(index):
    """The index answers: without the build for this Python it says so (another Python or another index);
    with it, pip's own lines say what failed. Unreachable: the reason (connection refused)."""
    url, write = index
    tag = torch_index.python_tag()
    write(["torch-2.14.1+cu126-cp27-cp27mu-linux_x86_64.whl", f"torch-2.13.0+cu126-{tag}-{tag}-linux_x86_64.whl"])
    key, fields = torch_index.diagnose(url, "2.14.1", "cu126", "bash scripts/setup.sh --site truba", timeout=10)
    assert key == "torch_index.missing" and fields["version"] == "2.14.1+cu126", (key, fields)
    write([f"torch-2.14.1+cu126-{tag}-{tag}-manylinux_2_28_x86_64.whl"])
    key, _ = torch_index.diagnose(url, "2.14.1", "cu126", timeout=10)
    assert key == "torch_index.listed"
    key, fields = torch_index.diagnose(f"http://127.0.0.1:{_closed_port()}/whl", "2.14.1", "cu126", timeout=10)
    assert key == "torch_index.unreachable" and "refused" in str(fields["reason"]).lower(), fields


def test_the_command_to_run_again_drops_an_index_url_already_given():
    _, fields = torch_index.diagnose(f"http://127.0.0.1:{_closed_port()}/x", "2.14.1", "cu126",
                                     "bash scripts/setup.sh --site truba --index-url http://old/x --prefix /c", 5)
    assert fields["again"] == "bash scripts/setup.sh --site truba --prefix /c"
