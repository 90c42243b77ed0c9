"""Warden: a Kubernetes operator for Slurm clusters with a shared root filesystem."""

__version__ = "0.2.0"
