"""What the tests share, importable by worker processes as ``tests.helpers.<module>`` under every
start method (cloudpickle pickles the env classes by reference, so these modules must stay
importable from the repository root):

* :mod:`tests.helpers.envs` -- deterministic single-agent envs (the differential tests' envs, the
  one-behaviour envs, the jittery async envs, the dataset counters, the frame-drawing envs).
* :mod:`tests.helpers.faults` -- envs that fail on purpose, this process's open descriptors, and
  :func:`~tests.helpers.faults.transport_of`, the one door to a vector env's internals.
* :mod:`tests.helpers.multiagent` -- a toy parallel env, PettingZoo constructors and the plain-loop
  reference of the multi-agent tests.
* :mod:`tests.helpers.fakes` -- an in-memory transport and a fake clock (no process at all).
* :mod:`tests.helpers.ray_sessions` -- real Ray for the tests: the local and 2-node fixtures.
"""
