"""Shared helpers for Warden's test tiers (control plane, clusters, fixtures)."""
