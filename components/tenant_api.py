"""The module path of the dynamic providers in stacks created before the layered layout.

Pulumi pickles a dynamic provider by reference, as its module path and class name (pulumi/sdk/python/lib/
pulumi/dynamic/dynamic.py serialize_provider, dill), and the provider host imports that path again for every
later diff, update, refresh and delete. A stack created before the move names this module, so it stays.
"""

from components.host_operations import (  # noqa: F401 -- the names the old pickles refer to
    GpuCapacityProvider,
    KamajiWebhookReadyProvider,
    KonnectivityReadyProvider,
    NodeMembershipProvider,
    NodeRegistrationProvider,
)
