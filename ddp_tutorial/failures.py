"""Why did a collective fail? A lost peer (another rank failed: this one is a victim), this
process's own CUDA/NCCL setup, or something else — decided from the error's text (a pure function,
no torch import; tested on recorded gloo and NCCL log lines)."""

from __future__ import annotations

import re


# NCCL/CUDA errors of this process's own setup: the same on every rank, not a lost peer.
_SETUP_MARKERS = (
    "no kernel image is available", "cuda driver version is insufficient", "invalid device ordinal",
    "duplicate gpu detected", "ncclinvalidusage", "ncclinvalidargument", "nccl version mismatch",
    "ncclunhandledcudaerror", "cudaerrornodevice", "no cuda gpus are available",
    "no socket interface found", "nccl_socket_ifname", "cuda-capable device", "only supported with gpus",
    "driver on your system is too old",
)
# A peer went away, or a collective timed out waiting for it.
_LOST_MARKERS_COMMON = (
    "connection reset", "connection closed", "broken pipe", "timed out", "timeout",
)
_LOST_MARKERS = {
    "gloo": _LOST_MARKERS_COMMON + ("connection refused", "peer"),
    "nccl": _LOST_MARKERS_COMMON + (
        "remote process exited", "ncclremoteerror", "network error", "communicator was aborted",
        "watchdog caught collective operation timeout", "closed by remote peer", "nccl communicator",
        "process group watchdog"),
}
WATCHDOG_LINE = "Watchdog caught collective operation timeout"


def classify_failure(text: str, backend: str = "gloo") -> str:
    """``lost_peer`` (another rank failed or vanished: this one is a victim), ``setup_error`` (this
    process's own CUDA/NCCL setup is wrong — on every rank alike, never a lost peer) or ``other``.

    The old test matched ``"socket"`` and could call NCCL's "no socket interface found" — a setup
    error of every rank — a lost peer; socket words alone no longer count."""
    lowered = text.lower()
    if any(m in lowered for m in _SETUP_MARKERS):
        return "setup_error"
    if any(_lost_marker_in(m, lowered) for m in _LOST_MARKERS.get(backend, _LOST_MARKERS["gloo"])):
        return "lost_peer"
    return "other"


def _lost_marker_in(marker: str, lowered: str) -> bool:
    """``peer`` only as the start of a word: the one inside "TypeError" made every TypeError a lost peer."""
    if marker == "peer":
        return re.search(r"(?<![a-z])peer", lowered) is not None
    return marker in lowered
