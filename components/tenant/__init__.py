"""Tenant layer: a hosted control plane, its objects, kube-proxy and the CNI."""
