"""Pristine state: fingerprints, golden snapshots, spares and the reset tiers (docs/architecture.md)."""
