"""Everything on the gRPC link with agents: the link service itself, the registry of sessions
and the accounts they serve, the dispatch of dynamic accounts to agents, and the routing of
operations to the agent that serves their account."""
