"""Test data shared by several tiers."""
