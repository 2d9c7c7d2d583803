"""The one torch internal the bundle leans on (``ipp.held_port.reused_by_the_group``: rank 0's engine
holds MASTER_PORT as a store server that its ``init_process_group`` reuses), checked as behaviour of the
torch installed here, not by its version. A failure here after a torch upgrade says which point of that
function's docstring torch no longer does; the notebooks keep working through the fallback
(``held_port.Reservation``), tested below with a torch that shares no store server.

The checks run in a process of their own (torch's table of store servers is one per process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

TWO_ROUNDS = '''
import os, sys
sys.path.insert(0, {repo!r})
import psutil, torch, torch.distributed as dist
from ddp_tutorial.ipp import held_port

def one_rank(name):
    """Rank 0 of a notebook call, alone: the port held, the group made on it, a collective."""
    port = held_port.hold_master_port("127.0.0.1")
    print(name, "HELD", type(held_port._HELD_STORE[0]).__name__, port, flush=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=0, world_size=1)
    except Exception as error:
        print(name, "INIT-FAILED", str(error).splitlines()[0] if str(error) else type(error).__name__, flush=True)
        return
    one = torch.ones(1)
    dist.all_reduce(one)
    listening = sorted({{c.laddr.ip for c in psutil.net_connections("tcp")
                         if c.status == "LISTEN" and c.laddr.port == port and c.pid == os.getpid()}})
    print(name, "GROUP", int(one.item()), "LISTENING", *listening, flush=True)
    from ddp_tutorial.ipp import joined
    print(name, "GROUP-STORE", type(joined.group_store()).__name__, flush=True)
    joined.joined(0)
    joined.every_rank_joined(1, 10)      # rank 0's key, set and seen through the group's store
    print(name, "JOINED", flush=True)
    dist.destroy_process_group()

one_rank("TORCH")
# Then a torch whose multi-tenant stores share no server (what a torch without the table would do):
# every TCPStore the package makes is made single-tenant.
real_store = dist.TCPStore
def single_tenant(*args, **kwargs):
    kwargs["multi_tenant"] = False
    return real_store(*args, **kwargs)
dist.TCPStore = single_tenant
one_rank("NO-SHARING")
'''


@pytest.fixture(scope="module")
def rounds() -> dict:
    """What each round said: {round: {word: [values]}} (one process for both: torch starts once)."""
    done = subprocess.run([sys.executable, "-c", TWO_ROUNDS.format(repo=str(REPO))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    seen: dict = {}
    for line in done.stdout.splitlines():
        name, word, *values = line.split()
        seen.setdefault(name, {})[word] = values
    return seen


def test_init_process_group_reuses_the_server_rank_0s_engine_holds(rounds):
    seen = rounds["TORCH"]
    why = (f"torch {torch.__version__} has changed what ddp_tutorial/ipp/held_port.py relies on (read "
           f"reused_by_the_group's docstring): ")
    assert seen["HELD"][0] == "TCPStore", why + (
        "a second multi-tenant TCPStore on a port this process serves is no longer that server (point 2: "
        "TCPServer::start's table); the notebooks now hold the port by the fallback, a Reservation")
    assert "INIT-FAILED" not in seen, why + (
        f"init_process_group on the held port failed: {' '.join(seen.get('INIT-FAILED', []))} — rank 0's "
        "rendezvous store is no longer multi-tenant (point 1: rendezvous._create_c10d_store), so it listens "
        "itself against our server and every notebook call fails with 'port in use'")
    assert seen["GROUP"][0] == "1" and seen["GROUP"][2:] == ["127.0.0.1"], why + (
        f"the group's store did not come back as the held server (listening on {seen['GROUP'][2:]}, held "
        "on 127.0.0.1 only): init_process_group made a server of its own")


def test_the_groups_store_is_reachable_for_the_joined_keys(rounds):
    """``ipp.joined.group_store``: the other private name of torch the notebook path uses (a notebook
    function's ranks wait there until every rank has joined the group, issue 44)."""
    seen = rounds["TORCH"]
    assert seen["GROUP-STORE"] != ["NoneType"] and "JOINED" in seen, (
        f"torch {torch.__version__} no longer has distributed_c10d._get_default_store(): a notebook "
        "function's ranks no longer wait for each other before they close the group (ipp/joined.py; the "
        "'Connection closed by peer' of issue 44 can come back under load)")


def test_with_a_torch_that_shares_no_server_the_port_is_reserved_and_the_group_takes_it(rounds):
    """The fallback: told no by ``reused_by_the_group``, ``hold_master_port`` reserves the port (bound, not
    listened on), and the group's own server listens on it (on every interface: torch's own socket)."""
    seen = rounds["NO-SHARING"]
    assert seen["HELD"][0] == "Reservation", seen
    assert "INIT-FAILED" not in seen, seen
    assert seen["GROUP"][0] == "1" and seen["GROUP"][2:] and "127.0.0.1" not in seen["GROUP"][2:], seen


RESERVED = '''
import socket, sys
sys.path.insert(0, {repo!r})
from ddp_tutorial.ipp import held_port
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as ports:
    ports.write("40300 40301")               # two ports to hand out
held = held_port.Reservation("127.0.0.1")
other = socket.socket()
other.bind(("127.0.0.1", 0))                 # the other port
try:
    socket.socket().bind(("127.0.0.1", 0))   # none left: the reserved port is not handed out
    print("HANDED-OUT")
except OSError:
    print("KEPT", held.port, other.getsockname()[1])
'''


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_reserved_port_is_handed_to_nobody():
    """What makes the fallback a hold: Linux gives a bound port to no bind to port 0 (nor a connection's
    source port). In a network namespace of our own whose ephemeral range is two ports."""
    shell = f"ip link set lo up && exec {sys.executable} -c \"$0\""
    run = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "bash", "-c", shell,
                          RESERVED.format(repo=str(REPO))], capture_output=True, text=True, timeout=60)
    if run.returncode != 0 and "Operation not permitted" in run.stderr and "KEPT" not in run.stdout:
        pytest.skip(f"no network namespace of our own here: {run.stderr.strip()[:200]}")
    assert run.returncode == 0 and "KEPT" in run.stdout, run.stdout + run.stderr[-2000:]
    held, other = run.stdout.split("KEPT", 1)[1].split()
    assert {held, other} == {"40300", "40301"}
