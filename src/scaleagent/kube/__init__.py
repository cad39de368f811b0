"""Kubernetes API access shared by the agent and the hub: credentials, raw JSON requests, discovery, list+watch."""
