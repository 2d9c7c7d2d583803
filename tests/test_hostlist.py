"""SLURM host lists: our parser, and scontrol where it is installed."""

import os
import resource
import shutil
import subprocess
import sys
import time

import pytest

from ddp_tutorial.hostlist import expand_hostlist, first_host
from ddp_tutorial.i18n import TutorialError

CASES = {
    "node1": ["node1"],
    "n1,n2": ["n1", "n2"],
    "gpu[01-03,07],cpu5": ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"],
    "palamut[1-2]": ["palamut1", "palamut2"],
    "a[8-11]": ["a8", "a9", "a10", "a11"],
    "a[008-010]": ["a008", "a009", "a010"],
    "r[1-2]n[1-2]": ["r1n1", "r1n2", "r2n1", "r2n2"],
    "x-1,y[3]": ["x-1", "y3"],
    "barbun[101-102,120],akya[5]": ["barbun101", "barbun102", "barbun120", "akya5"],
}


@pytest.mark.parametrize("text,hosts", CASES.items())
def test_expand(text, hosts):
    assert expand_hostlist(text) == hosts
    assert first_host(text) == hosts[0]


@pytest.mark.parametrize("bad", ["", "gpu[01-03", "gpu01]", "gpu[a-b]", "gpu[3-1]", "gpu[[1]]", "a,,b", "g[1-9999999]",
                                 "[1-3]", "gpu[]", "gpu1,", "n[0-9999]x[0-9999]", "a[1-60000],b[1-60000]"])
def test_malformed_hostlists_are_clear_errors(bad):
    with pytest.raises(TutorialError) as error:
        expand_hostlist(bad)
    assert "host list" in str(error.value)


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol (slurm-client) is not installed")
@pytest.mark.parametrize("text", list(CASES))
def test_same_answer_as_scontrol(text, tmp_path):
    # `scontrol show hostnames` talks to no daemon, but it insists on reading a slurm.conf.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost\n"
                    "PartitionName=p Nodes=ALL\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True,
                         timeout=20, env=env)
    if out.returncode != 0:
        pytest.skip(f"scontrol cannot run here: {out.stderr.strip()}")
    assert out.stdout.split() == expand_hostlist(text)


def _capped(limit_bytes: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


@pytest.mark.parametrize("text", ["n[0-9999]x[0-9999]", "a[0-99]b[0-99]c[0-99]d[0-99]", "x[1-99999,1-99999]"])
def test_an_oversized_host_list_is_refused_before_it_is_built(text):
    """A01: the bound was checked after the 10^8-name product was built (30 s of CPU, then MemoryError).
    Run under a 1 GiB address-space cap and a time limit: the check must come first."""
    code = ("import sys\nfrom ddp_tutorial.hostlist import expand_hostlist\n"
            "from ddp_tutorial.i18n import TutorialError\n"
            "try:\n    expand_hostlist(sys.argv[1])\nexcept TutorialError as e:\n    print('REFUSED', e)\n")
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True, timeout=60,
                         preexec_fn=_capped(1 << 30), env=dict(os.environ, DDP_TUTORIAL_LANG="en"))
    assert out.stdout.startswith("REFUSED") and "more than 100000 hosts" in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - began < 30


@pytest.mark.parametrize("lang,prefix", [("en", "error: "), ("tr", "hata: ")])
def test_the_hostlist_command_gives_a_message_not_a_traceback(lang, prefix):
    """J02: `python -m ddp_tutorial.hostlist 'gpu[]'` was a traceback, and '[1-3]' gave the host '1'."""
    env = dict(os.environ, DDP_TUTORIAL_LANG=lang)
    for bad in ("gpu[]", "gpu1,", "[1-3]"):
        out = subprocess.run([sys.executable, "-m", "ddp_tutorial.hostlist", bad], capture_output=True, text=True,
                             timeout=60, env=env)
        assert out.returncode == 2 and out.stderr.startswith(prefix) and "Traceback" not in out.stderr, out.stderr
        assert repr(bad) in out.stderr and out.stdout == ""
    good = subprocess.run([sys.executable, "-m", "ddp_tutorial.hostlist", "gpu[01-02]"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert good.returncode == 0 and good.stdout.split() == ["gpu01", "gpu02"]


def test_the_reasons_are_in_the_users_language(monkeypatch):
    """The reasons inside the message were English under DDP_TUTORIAL_LANG=tr."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    for bad, words in (("gpu[01-", "']' olmadan bir '['"), ("gpu[07-03]", "tersten gidiyor"), ("a,,b", "boş bir öğe"),
                       ("[1-3]", "harf ya da rakamla başlar"), ("n[0-999]x[0-999]", "düğümden fazla")):
        with pytest.raises(TutorialError) as caught:
            expand_hostlist(bad)
        assert words in str(caught.value) and "Hatalı SLURM düğüm listesi" in str(caught.value)
