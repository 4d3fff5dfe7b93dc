"""Operator commands: preflight, status, verify, kubeconfig, passphrase, upstream, graph."""
