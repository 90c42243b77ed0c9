"""Pure renderers: a cluster's spec in, Kubernetes manifests and config file text out. No I/O."""
