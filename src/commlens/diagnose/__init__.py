"""Diagnosis: slow links and hosts (``links``), stragglers, hung or mismatched collectives.

Each family is its own module, imported where used (torch and matplotlib load only when measuring/plotting).
"""
