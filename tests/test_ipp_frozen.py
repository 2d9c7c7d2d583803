"""An engine frozen (SIGSTOP) mid-training is named as the cause (issue 25, I04): before, the message
named only the victim, "rank 1 … lost contact … look for its error above", and there was none.
Real local engines and gloo; the run ends about the training's timeout after the freeze."""

import os
import signal
import threading
import time

import pytest

from ddp_tutorial import ipp
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.i18n import TutorialError
from engine_checks import alive, no_engines_left  # noqa: F401 - the autouse fixture




def test_a_stopped_engine_is_named_not_only_its_victim(mnist_root, tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    checkpoints = tmp_path / "ckpt"
    seen = {}

    def stop_rank_0_mid_run():
        while ipp.current() is None or not (checkpoints.is_dir() and any(checkpoints.iterdir())):
            time.sleep(0.05)
        engines = ipp.current()
        seen["pids"] = [p.pid for p in engines.processes] + [engines.cluster.controller.pid]
        seen["stopped_at"] = time.monotonic()
        os.kill(engines.pids[0], signal.SIGSTOP)

    threading.Thread(target=stop_rank_0_mid_run, daemon=True).start()
    config = TrainConfig(dataset="mnist", root=str(mnist_root), epochs=300, batch_size=64, threads=1, timeout=8,
                         checkpoint_dir=str(checkpoints))
    with pytest.raises(TutorialError) as caught:
        ipp.train(config, n=2)
    assert time.monotonic() - seen["stopped_at"] < 45
    text = str(caught.value)
    assert "rank 0 (engine" in text and "stopped answering: its process is stopped (SIGSTOP" in text, text
    assert text.index("rank 0 (engine") < text.index("rank 1 (engine"), text  # the cause first, then the victim
    assert "look for its error above" not in text, text
    assert ipp.current() is None
    assert not [p for p in seen["pids"] if alive(p)], "engine or controller processes left behind"
