"""Tenant layer: `Tenant` (one whole tenant), its hosted control plane and objects, kube-proxy and the CNI."""
