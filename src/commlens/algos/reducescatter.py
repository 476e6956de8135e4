"""reducescatter algorithms (being written)."""
