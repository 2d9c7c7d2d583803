"""Imported only by the server the ranks are forked from (:func:`ddp_tutorial.supervisor.rank_context` lists it
last among the server's imports): when its launcher and its ranks are gone, the server leaves at once.

Without it the server would end as any Python program does, tearing down the torch it imported for the ranks:
1–2 CPU-s (measured with torch 2.14 and ``torch._dynamo`` loaded), while the job or the next test goes on. It
has nothing to save: it only imports and forks.
"""

import atexit
import os

# Registered last, so it runs first (atexit runs its functions in reverse order), before torch's own.
atexit.register(os._exit, 0)
