"""ddp_tutorial.notebook in a real Jupyter kernel: the set-up line, and our errors shown as the
attendee's cell + our message (no frames from inside the package)."""

import re

import pytest

jupyter_client = pytest.importorskip("jupyter_client")


def _run(kc, code):
    kc.execute(code)
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=120)
        if msg["msg_type"] in ("stream", "error", "execute_result"):
            out.append(msg["content"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out


def test_setup_line_and_error_display(tmp_path, monkeypatch):
    (tmp_path / "tr").mkdir()
    monkeypatch.setenv("DDP_TUTORIAL_ROOT", str(tmp_path / "data"))
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path / "tr"))
    try:
        out = _run(kc, "from ddp_tutorial import notebook\nNB = notebook.setup()")
        line = out[0]["text"]
        assert line.startswith("defter dili: tr") and "$DDP_TUTORIAL_ROOT" in line
        assert str(tmp_path) not in line  # no machine path in a stored output
        # Until a cell has imported torch, each cell runs with the cycle collector off (ddp_tutorial.collector).
        assert _run(kc, "import gc, sys\nprint(gc.isenabled(), 'torch' in sys.modules)")[0]["text"] == "False False\n"
        out = _run(kc, "from ddp_tutorial.config import TrainConfig\nfrom ddp_tutorial.train import train\n"
                       "train(TrainConfig(epochs=-1))")
        error = [m for m in out if "traceback" in m][0]
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
        assert "train(TrainConfig(epochs=-1))" in text          # the attendee's line
        assert "--epochs=-1" in text and "tam sayı" in text      # our message, in Turkish
        assert "ddp_tutorial/" not in text and "runstate" not in text  # no package frames
        # That cell imported torch: what it made is frozen, and the cells after it run with the collector on.
        seen = _run(kc, "print(gc.isenabled(), gc.get_freeze_count())")[0]["text"].split()
        assert seen[0] == "True" and int(seen[1]) > 100_000, seen
    finally:
        km.shutdown_kernel(now=True)
