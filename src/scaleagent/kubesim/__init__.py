"""A Kubernetes API server simulator for tests, benchmarks and the demo.

It is test and demo infrastructure, not the product, and it earns trust only by fidelity: the
official Kubernetes clients must work against it unchanged. What it does and does not simulate is
written down in docs/kubesim.md.
"""
