"""A launcher of forked engines (ddp_tutorial.ipp.forked) without ipp.start's care: no watchdog, no atexit stop.

    python forked_engines_probe.py MODE OUT

Starts ipyparallel's controller and two engines forked from the ranks' server, sets ``PROBE_MOMENT`` in its
environment *after* the server started, and writes to OUT (JSON) what the engines say about themselves:
pid, name, session, folder, argv and the ``PROBE_MOMENT`` they see, with the controller's pid. Then:

* ``leave``: SIGSTOPs engine 0, stops only the controller and exits normally (the engines are left running);
* ``wait``: sleeps until it is killed;
* ``once``: stops the engines and the controller and returns.
"""

import json
import logging
import os
import signal
import sys
import time


def about_me():
    import os
    import sys
    with open(f"/proc/{os.getpid()}/comm") as f:
        name = f.read().strip()
    return {"pid": os.getpid(), "name": name, "sid": os.getsid(0), "cwd": os.getcwd(), "argv": sys.argv,
            "moment": os.environ.get("PROBE_MOMENT")}


def main(mode, out):
    import ipyparallel
    from ddp_tutorial.ipp import forked

    forked.start_server()
    os.environ["PROBE_MOMENT"] = "after the server started"
    cluster = ipyparallel.Cluster(n=2, log_level=logging.ERROR, shutdown_atexit=False,
                                  engine_launcher_class=forked.ForkedEngineSetLauncher)
    cluster.start_controller_sync()
    cluster.start_engines_sync(2)
    client = cluster.connect_client_sync()
    client.wait_for_engines(2, timeout=120)
    engines = client[:].apply_sync(about_me)
    client.close()
    with open(out + ".tmp", "w") as f:
        json.dump({"engines": engines, "controller": cluster.controller.pid, "launcher": os.getpid()}, f)
    os.replace(out + ".tmp", out)
    if mode == "once":
        cluster.stop_cluster_sync()
        return
    if mode == "leave":
        os.kill(engines[0]["pid"], signal.SIGSTOP)
        cluster.stop_controller_sync()
        return
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
