"""Imported only by the server the ranks are forked from, first among its imports
(:func:`ddp_tutorial.supervisor.rank_context`): the cycle collector is off while the server imports torch for the
ranks, and ``server_exit.py``, its last import, freezes what was imported and turns the collector back on before
the server forks its first rank (``collector.py``: what Python's documentation of ``gc.freeze`` advises for a
process that forks).
"""

from .collector import pause

pause()
