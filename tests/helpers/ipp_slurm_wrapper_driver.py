"""SLURM engines started through a ``--python`` wrapper, as from the workshop container (docs/truba.md).

Run by tests/test_engine_network.py inside the lab's login namespace (``SlurmLab.login_command``):

    python tests/helpers/ipp_slurm_wrapper_driver.py OUT.json BASE_DIR

The wrapper stands in for ``exec apptainer exec --nv ddp-env.sif python "$@"``: it notes every start
and runs this interpreter. The engines (2 nodes × 1) report where they run, the network interface
gloo/NCCL were given, and an all-reduce across the nodes. Written to OUT.json for the test.
"""

import json
import sys
from pathlib import Path

from ddp_tutorial import ipp
from ddp_tutorial.i18n import TutorialError

out_path, base = sys.argv[1], Path(sys.argv[2])
report = {}
wrapper = base / "python"
wrapper.write_text(f'#!/bin/sh\necho "$(hostname) $*" >> {base / "wrapper.log"}\nexec {sys.executable} "$@"\n')
wrapper.chmod(0o755)


def facts(env):
    import os
    import socket
    import sys

    import torch
    import torch.distributed as dist

    x = torch.tensor([float(env.rank + 1)])
    dist.all_reduce(x)
    return {"rank": env.rank, "host": socket.gethostname(), "master": env.master_addr, "sum": x.item(),
            "gloo": os.environ.get("GLOO_SOCKET_IFNAME"), "nccl": os.environ.get("NCCL_SOCKET_IFNAME"),
            "parent_cmd": open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\0", b" ").decode(),
            "executable": sys.executable}


try:
    ipp.start_slurm(nodes=2, engines_per_node=1, run_dir=str(base / "runs"), time_limit="00:05:00",
                    python=str(base / "no-such-python"))
except TutorialError as error:
    report["bad_python"] = {"key": error.key, "message": str(error)}

engines = ipp.start_slurm(nodes=2, engines_per_node=1, run_dir=str(base / "runs"), time_limit="00:05:00",
                          python=str(wrapper))
report["master_addr"], report["hosts"] = engines.master_addr, engines.hosts
try:
    report["facts"] = ipp.run(facts, keep=True)
finally:
    ipp.stop()
report["wrapper_log"] = (base / "wrapper.log").read_text() if (base / "wrapper.log").exists() else ""
Path(out_path).write_text(json.dumps(report))
