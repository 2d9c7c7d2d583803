"""Benchmarks of ``ddp_tutorial``: how fast is the package's training path, and why.

* :mod:`benchmarks.seed_pipeline` — the seed tutorial's pipeline, written faithfully, as the reference to beat;
* :mod:`benchmarks.bound` — the compute bound: one process, data in memory, same model and steps, no DDP;
* :mod:`benchmarks.throughput` — the command line: runs the modes below and writes the JSON report;
* :mod:`benchmarks.runner` — one pipeline run in fresh processes, and the medians of repeated runs;
* :mod:`benchmarks.table` — seed vs package vs bound, alternating and repeated, with the goals;
* :mod:`benchmarks.scaling` — throughput against world size and the time to a target accuracy;
* :mod:`benchmarks.contention` — world 1 idle against N busy processes the benchmark starts and stops;
* :mod:`benchmarks.comm` — DDP's communication next to the step's computation, and the limits it implies;
* :mod:`benchmarks.gpu` — the prepared GPU check (CPU path without a GPU);
* :mod:`benchmarks.profile` — where a step's time goes (torch.profiler).

The figures are drawn by :mod:`ddp_tutorial.figures` from the report (the recorded one is package data).
Every run happens in fresh processes, so no variant profits from another's warm caches.
See ``benchmarks/README.md`` for what each number includes and the recorded figures.
"""
