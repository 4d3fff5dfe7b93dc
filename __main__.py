"""gpu-tenancy: a multi-tenant GPU Kubernetes platform on one Docker host.

Reads and validates the stack configuration before any resource exists, then
builds the layers top-down: kind management cluster -> Kamaji -> one hosted
control plane per tenant -> its worker nodes -> HAMi with simulated GPUs and
the in-stack smoke test. Tenants never depend on each other.
"""

import pulumi

from components.plan import plan_summary
from config import read_stack_config

config = read_stack_config()

pulumi.export("plan", plan_summary(config))
