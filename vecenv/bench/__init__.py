"""The throughput benchmark (``vecenv-bench``, ``python -m vecenv.bench``), one module per job:

- :mod:`~vecenv.bench.envs`: the workloads and their busy envs (shared with scripts/train_ppo.py)
- :mod:`~vecenv.bench.vectors`: a vector env of a named kind (shared with scripts/train_ppo.py)
- :mod:`~vecenv.bench.runners`: the runners, a registry of named objects
- :mod:`~vecenv.bench.calibration`, :mod:`~vecenv.bench.measure`: what runs in a measuring process
- :mod:`~vecenv.bench.child`: the fresh interpreter each measurement runs in
- :mod:`~vecenv.bench.procfs`: Linux ``/proc`` readings (process trees, CPU time, PSS), also
  used by the scripts and the tests
- :mod:`~vecenv.bench.plan`, :mod:`~vecenv.bench.report`, :mod:`~vecenv.bench.cli`: the cells to
  measure, the tables and chart, the command line

Nothing here is imported by ``import vecenv``; this package imports none of its modules either,
so that ``vecenv.bench.procfs`` stays light.
"""
