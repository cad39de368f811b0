"""Who is calling, and what they may do: HTTP callers (tokens, client certificates) and agents
(identities bound to zones and accounts). docs/security.md is the user's view."""
