"""The real-time cache of every cluster's objects: indexes, queries, subscriptions (the
multi-cluster watch), waits for an operation's changes, and the manifest views Clouddriver reads."""
