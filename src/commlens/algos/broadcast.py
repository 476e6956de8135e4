"""broadcast algorithms (being written)."""
