"""SLURM host lists: our parser, and scontrol where it is installed."""

import os
import shutil
import subprocess

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


@pytest.mark.parametrize("bad", ["", "gpu[01-03", "gpu01]", "gpu[a-b]", "gpu[3-1]", "gpu[[1]]", "a,,b", "g[1-9999999]"])
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
