"""vecenv's benchmarks (``vecenv-bench``, ``python -m vecenv.bench``), one suite per run, one
module per job:

- :mod:`~vecenv.bench.cli`: the command line (``--suite``), the run's header, the output files
- :mod:`~vecenv.bench.suite`: what a suite is, and the helpers the suites share
- the suites: :mod:`~vecenv.bench.step` (vector env throughput; its cells planned in
  :mod:`~vecenv.bench.plan`, measured in :mod:`~vecenv.bench.measure`, reported in
  :mod:`~vecenv.bench.report`, its runners in :mod:`~vecenv.bench.runners`),
  :mod:`~vecenv.bench.rollouts` (``rollout`` against ``step``), :mod:`~vecenv.bench.collection`
  (writing datasets) and :mod:`~vecenv.bench.multiagent` (PettingZoo envs against SuperSuit)
- :mod:`~vecenv.bench.child`: the one fresh-process runner every measurement runs in
- :mod:`~vecenv.bench.stopping`: how the scripts under ``scripts/`` end on Ctrl+C or SIGTERM
- :mod:`~vecenv.bench.procfs`: the one reader of Linux ``/proc`` (process trees, CPU time, PSS),
  also used by the scripts and the tests
- :mod:`~vecenv.bench.envs`, :mod:`~vecenv.bench.vectors`, :mod:`~vecenv.bench.calibration`: the
  workloads and their busy envs, a vector env of a named kind (both shared with
  scripts/train_ppo.py), and the calibration of the busy envs

Nothing here is imported by ``import vecenv``; this package imports none of its modules either,
so that ``vecenv.bench.procfs`` stays light.
"""
