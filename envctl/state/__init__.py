"""Pristine state: fingerprints, golden snapshots, spares and the reset tiers (DESIGN.md §5-6)."""
