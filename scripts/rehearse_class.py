"""The class rehearsal for a whole class (issue 45 item 4): N attendees at once on a SLURM lab in a site's shape.

The same code as ``tests/test_class_rehearsal.py`` (N = 4 there; ``tests/helpers/classroom.py``): N real
non-root users, each with a home (700) and a clone, start a session with ``sbatch slurm/lab.sbatch``, submit
05's job from inside it into the class reservation, and end the day with ``scancel``; then the numbers:
sessions, refusals, 05's jobs (state, waits, drain time), ports held by two users, what is left.

    sudo .venv/bin/python scripts/rehearse_class.py --attendees 30
    sudo .venv/bin/python scripts/rehearse_class.py --attendees 8 --json /tmp/class-8.json
    sudo .venv/bin/python scripts/rehearse_class.py --attendees 4 --site tests/data/sites/other.toml

The site's table (``--site``: a shipped site's name or a TOML file in truba.toml's format, such as one that
``ddp-tutorial site derive`` wrote and a person completed; default TRUBA's) gives the lab's shape and the day:
its ``[day]`` session (partition, cores, time) and 05's job (partition, nodes, GPUs, time), the partitions'
cores, GPUs and rules. For TRUBA and 30 attendees: 3 session nodes and as many nodes of the day's job
partition as memory allows (the lab has at most 16 nodes), so not every 05 job runs at once. Needs root,
setpriv, useradd and the SLURM lab's packages (tests/helpers/slurmlab.py). Memory: about 1.5 GB per running
05 job here. Every user is removed at the end, on failure too.
Exit code 0 when the class passed (nothing refused, every 05 job COMPLETED with its accuracy line, no port
held by two users, nothing left), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))
sys.path.insert(0, str(REPO))

from classroom import run_class, write_numbers  # noqa: E402


def load_site(name: str):
    """``--site``'s table, with the day the rehearsal needs (``[day]`` and its two partitions)."""
    from ddp_tutorial import sites
    site = sites.load(name)
    day = site.section("day")
    missing = [key for key in ("session_partition", "session_cores", "session_time", "job_partition", "job_nodes",
                               "job_gpus_per_node", "job_time") if key not in day]
    if missing:
        raise ValueError(f"its [day] table has no {', '.join(missing)}: fill them (truba.toml's [day] shows each)")
    unknown = [day[key] for key in ("session_partition", "job_partition") if day[key] not in site.partitions]
    if unknown:
        raise ValueError(f"[day] names {', '.join(unknown)}, not a partition of the table")
    return site


def verdict(numbers: dict) -> list:
    """What went wrong in a rehearsal, one line each (empty: the class passed)."""
    wrong = list(numbers["refused"])
    wrong += [f"session of {user} ended before its address lines: {tail[-300:]}"
              for user, tail in numbers["sessions_failed"].items()]
    wrong += numbers["session_access"]
    for user, job in numbers["lab_jobs"].items():
        if job["Partition"] != numbers["session_partition"] or job["Reservation"] not in ("", "(null)"):
            wrong.append(f"session {user} in {job['Partition']}/{job['Reservation']}")
    for job_id, job in numbers["fifth_jobs"].items():
        if job["state"] != "COMPLETED" or not job["accuracy_line"]:
            line = "found" if job["accuracy_line"] else "missing"
            wrong.append(f"05 job {job_id} of {job['user']}: {job['state']}, accuracy line {line}")
    if len(numbers["fifth_jobs"]) != numbers["attendees"]:
        wrong.append(f"{len(numbers['fifth_jobs'])} 05 jobs for {numbers['attendees']} attendees")
    wrong += [f"port {where} held at one moment by {', '.join(held)} (uid:command)"
              for where, held in numbers["port_collisions"].items()]
    wrong += [f"on the login node: {work} (uid:command)" for work in numbers["login_work"]]
    wrong += [f"left: process {p}" for p in numbers["processes_left"]]
    wrong += [f"left: job {j}" for j in numbers["jobs_left"]]
    return wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attendees", type=int, default=30, help="how many attendees (default 30)")
    parser.add_argument("--train-subset", type=int, default=512, help="images each 05 job trains on (default 512)")
    parser.add_argument("--json", type=Path,
                        help="where the numbers go (default tests/artifacts/class-rehearsal-N.json; another "
                             "site's name before -N)")
    parser.add_argument("--site", default="truba",
                        help="the site's table: a shipped site's name or a TOML file (default truba)")
    parser.add_argument("--gpu-nodes", type=int, help="nodes of the day's job partition in the reservation "
                        "(default: every 05 job at once, as memory allows)")
    parser.add_argument("--venv", type=Path, help="the class environment (default: the checkout's .venv if every user "
                        "can run it, else one built over /usr/bin/python3 that reads its packages)")
    parser.add_argument("--export", action="append", default=[], metavar="NAME=VALUE",
                        help="one more variable in every attendee's environment ({reservation}: the class "
                             "reservation's name), e.g. the old kit's SBATCH_PARTITION=<the day's job partition>")
    args = parser.parse_args(argv)
    if any("=" not in pair for pair in args.export):
        parser.error("--export NAME=VALUE")
    if not 1 <= args.attendees <= 99:
        parser.error(f"--attendees {args.attendees}: from 1 to 99")
    try:
        site = load_site(args.site).name
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"--site {args.site}: {error}")
    try:
        numbers = run_class(args.attendees, train_subset=args.train_subset, gpu_nodes=args.gpu_nodes, venv=args.venv,
                            extra_env=dict(pair.split("=", 1) for pair in args.export), site=args.site,
                            say=lambda line: print(line, flush=True))
    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as error:
        print(f"!! the rehearsal stopped: {error}")
        return 1
    stem = "class-rehearsal" if args.site == "truba" else f"class-rehearsal-{site}"
    path = args.json or REPO / "tests" / "artifacts" / f"{stem}-{args.attendees}.json"
    write_numbers(numbers, path)
    print(json.dumps({k: v for k, v in numbers.items() if k not in ("lab_jobs", "fifth_jobs")}, ensure_ascii=False))
    print(f"numbers: {path}")
    wrong = verdict(numbers)
    for line in wrong:
        print("!!", line)
    print(f"{numbers['attendees']} attendees: " + ("the class passed" if not wrong else f"{len(wrong)} problem(s)"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
