"""How messages reach workers: the Transport interface and its backends (processes, the group
hosted by the parent, Ray actors)."""
