"""The exit codes of every command and training process (no torch import: the sbatch templates,
the launchers and the docs all read them from here).

| code | meaning | what the job script does |
|---|---|---|
| 0 | done | nothing |
| 2 | a user error: the message says what was wrong and what to do | fails the job |
| 3 | this rank lost contact with the others: another rank failed first, look for its error | fails the job |
| 75 | preempted: SIGUSR1 arrived, a checkpoint was written (EX_TEMPFAIL, "try again later") | requeues the job |
| 130 | interrupted (Ctrl-C) | fails the job |
"""

OK = 0
USER_ERROR = 2
LOST_PEER = 3
REQUEUE = 75
INTERRUPTED = 130
