"""The agent process: watches accounts and streams their changes."""
