"""The hub: the control plane agents connect to; it caches every account and routes operations."""
