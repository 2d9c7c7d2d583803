"""Where rank 0 listens and which network gloo/NCCL use: the interface rule (ddp_tutorial.ipp.remote,
the sbatch templates' ddp_tutorial.slurm.render.IFNAME_RULE), and SLURM engines started through a
``--python`` wrapper as from the documented container (on the two-node SLURM lab: slow, marked slurm)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.ipp import remote
from ddp_tutorial.ipp import slurm as ipp_slurm

REPO = Path(__file__).resolve().parent.parent


def _non_loopback_address():
    psutil = pytest.importorskip("psutil")
    for name, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return name, a.address
    pytest.skip("this machine has no non-loopback IPv4 address")


def test_the_interface_rule_on_this_machine():
    name, address = _non_loopback_address()
    assert remote.interface_for(address) == name          # rank 0: the interface holding its address
    assert remote.address_towards(address) == address     # the route to oneself starts at that address
    assert remote.address_towards("127.0.0.1") is None and remote.address_towards(None) is None
    assert remote.own_address(address) == address         # what an engine reports as MASTER_ADDR
    assert not remote.own_address(None).startswith("127.")


def test_the_interface_rule_never_chooses_loopback():
    """Review N9: rank 0 on loopback (127.*, or a name that resolves there) is never an interface for
    gloo/NCCL: the other nodes cannot reach it there; gloo/NCCL choose instead."""
    for address in ("127.0.0.1", "127.0.1.1", "localhost"):
        assert remote.interface_for(address) is None, address
    name = socket.gethostname()
    if socket.gethostbyname(name).startswith("127."):   # as on this machine (and Debian's /etc/hosts)
        assert remote.interface_for(name) is None


def test_engines_set_gloo_and_nccl_interfaces_unless_set():
    name, address = _non_loopback_address()
    code = ("import os, sys; from ddp_tutorial.ipp import remote; r = remote.use_interface(sys.argv[1]); "
            "print(r, os.environ.get('GLOO_SOCKET_IFNAME'), os.environ.get('NCCL_SOCKET_IFNAME'))")
    base = {k: v for k, v in os.environ.items() if not k.endswith("SOCKET_IFNAME") and k != "DDP_TUTORIAL_IFNAME"}

    def run(master, **env):
        done = subprocess.run([sys.executable, "-c", code, master], capture_output=True, text=True, timeout=60,
                              cwd=REPO, env={**base, **env})
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run(address) == [name, name, name]
    assert run("127.0.0.1") == ["None", "None", "None"]                 # rank 0 on this machine: nothing
    assert run(address, NCCL_SOCKET_IFNAME="^docker") == [name, name, "^docker"]  # the user's value wins
    # the variable wins over the route (an interface that exists: a missing one is refused, test_ipp_calls.py)
    assert run(address, DDP_TUTORIAL_IFNAME="lo") == ["lo", "lo", "lo"]


def test_the_engines_python_must_be_an_executable_file(tmp_path):
    with pytest.raises(TutorialError) as caught:
        ipp_slurm.engine_command(str(tmp_path / "missing"))
    assert caught.value.key == "ipp.slurm_bad_python" and "missing" in str(caught.value)
    wrapper = tmp_path / "python"
    wrapper.write_text('#!/bin/sh\nexec apptainer exec --nv ddp-env.sif python "$@"\n')
    wrapper.chmod(0o755)
    assert ipp_slurm.engine_command(str(wrapper)) == {"engine_cmd": [str(wrapper), "-m", "ipyparallel.engine"]}
    assert ipp_slurm.engine_command(None) == {}


@pytest.mark.slurm
def test_slurm_engines_through_a_python_wrapper_meet_at_rank_0s_address(slurm_cluster, tmp_path):
    """2 nodes × 1 engine through SLURM, started by a --python wrapper (the container's way): every
    engine runs through the wrapper, MASTER_ADDR is rank 0's address on the nodes' network (not its
    node name), gloo/NCCL use the interface holding it, and an all-reduce crosses the nodes."""
    lab = slurm_cluster
    out = tmp_path / "report.json"
    env = dict(lab.env, IPYTHONDIR=str(tmp_path / "ipython"), PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en")
    proc = subprocess.run(lab.login_command([sys.executable, str(REPO / "tests" / "helpers" /
                                                                 "ipp_slurm_wrapper_driver.py"),
                                             str(out), str(tmp_path)]),
                          env=env, capture_output=True, text=True, timeout=600, cwd=str(REPO))
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    r = json.loads(out.read_text())
    assert r["bad_python"]["key"] == "ipp.slurm_bad_python", r
    assert r["master_addr"] == "10.233.0.1" and r["hosts"] == ["n1", "n2"], r
    facts = r["facts"]
    assert [f["host"] for f in facts] == ["n1", "n2"] and {f["sum"] for f in facts} == {3.0}
    assert {f["master"] for f in facts} == {"10.233.0.1"}
    assert {(f["gloo"], f["nccl"]) for f in facts} == {("eth0", "eth0")}, facts
    assert sorted(line.split()[0] for line in r["wrapper_log"].splitlines()) == ["n1", "n2"], r["wrapper_log"]
    assert all("ipyparallel.engine" in line for line in r["wrapper_log"].splitlines())
    assert slurm_cluster.queue() == []
