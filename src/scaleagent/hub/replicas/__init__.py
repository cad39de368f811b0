"""Hub replicas as peers: discovery of the others, who holds which account, forwarding to them."""
