"""The module path of the dynamic providers in stacks created before the layered layout.

Pulumi pickles a dynamic provider by reference, as its module path and class name (pulumi/sdk/python/lib/
pulumi/dynamic/dynamic.py serialize_provider, dill), and the provider host imports that path again for every
later diff, update, refresh and delete. A stack created before the move names this module, so it stays.
"""

# The names the old pickles refer to, from the modules of their layers today.
from components.gpu.operations import GpuCapacityProvider  # noqa: F401
from components.management.operations import KamajiWebhookReadyProvider  # noqa: F401
from components.tenant.operations import KonnectivityReadyProvider  # noqa: F401
from components.worker.operations import NodeMembershipProvider, NodeRegistrationProvider  # noqa: F401
