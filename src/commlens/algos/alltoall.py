"""alltoall algorithms (being written)."""
