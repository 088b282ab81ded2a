"""What crosses between parent and workers: the messages and their encoding, the shared buffers,
and what both ends of a pipe share."""
