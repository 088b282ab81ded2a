"""The parent side of a vector env: its APIs, its call state, the worker pool and restarts."""
