"""Exceptions of the rollout collector, shared by every module of the package."""

from __future__ import annotations


class PolicyError(ValueError):
    """The policy returned actions that are not in the environments' action space."""


class UnsupportedSpaceError(TypeError):
    """A space cannot be stored as fixed-shape arrays (only Box, Discrete, MultiDiscrete,
    MultiBinary and Dict/Tuple of them can)."""


class MinariNotInstalledError(ImportError):
    """``format="minari"`` or a Minari export was asked for but Minari (with its HDF5
    backend) is not installed."""
