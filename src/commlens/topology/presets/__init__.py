"""Topology presets shipped with commlens, one YAML file each (see docs/model.md)."""
