"""Accounts as data: their lifecycle states, the request models, the service that migrates and
deactivates them through agents, Clouddriver's credentials API, kubeconfig references and the
encryption of stored kubeconfigs."""
