"""allreduce algorithms (being written)."""
