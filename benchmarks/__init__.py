"""Benchmarks of ``ddp_tutorial``: how fast is the package's training path, and why.

* :mod:`benchmarks.seed_pipeline` — the seed tutorial's pipeline, written faithfully
  (torchvision data set with ``ToTensor``, ``DataLoader(batch_size=128)``,
  ``DistributedSampler``, DDP, Adam), as the reference to beat;
* :mod:`benchmarks.bound` — the compute bound: one process, the data already in memory
  as float tensors, the same model and the same number of optimizer steps, no DDP;
* :mod:`benchmarks.throughput` — runs the seed pipeline, the package
  (``ddp_tutorial.train`` through its own launcher) and the bound, alternating and
  repeated, prints the three-way table and writes JSON; ``--mode scaling`` measures
  throughput, parallel efficiency and time to a target accuracy versus world size and
  draws a figure.

Every run happens in fresh processes, so no variant profits from another's warm caches.
See ``benchmarks/README.md`` for what each number includes and the recorded figures.
"""
