"""What a worker runs: the transport-free core, the process loop, the env groups."""
