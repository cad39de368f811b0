"""Scale Agent: stream every object of many Kubernetes clusters to one hub, and operate them from there."""

__version__ = "0.1.0"
