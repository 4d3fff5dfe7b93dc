"""Every dynamic provider of the program, under the one module path the Pulumi state names. This module never moves.

Pulumi pickles a dynamic provider by reference, as a module path and a class name (pulumi/dynamic/dynamic.py
serialize_provider, dill), and the provider host imports that path again for every diff, refresh and delete
(pulumi/dynamic/__main__.py get_provider). Each class is written in its layer's operations module and named here
(`host_operations.declare` sets its `__module__`), so a layer's module can move without touching the state. A new
provider is imported here; renaming one or moving this module is a state migration (tests/test_old_state.py).
Stacks created before this module (commit e08431f and earlier) name the layers' modules, `components.<layer>.
operations`: the classes stay there until no supported stack was created before this module (CHANGELOG).
"""

from components.gpu.operations import GpuCapacityProvider, GpuPluginReadyProvider, HamiWebhookReadyProvider
from components.management.operations import KamajiWebhookReadyProvider, MetalLBWebhookReadyProvider
from components.tenant.operations import KonnectivityReadyProvider, TenantVersionProvider
from components.worker.operations import (
    NodeDrainProvider,
    NodeMembershipProvider,
    NodeReadyProvider,
    NodeRegistrationProvider,
)

__all__ = [
    "GpuCapacityProvider", "GpuPluginReadyProvider", "HamiWebhookReadyProvider", "KamajiWebhookReadyProvider",
    "KonnectivityReadyProvider", "MetalLBWebhookReadyProvider", "NodeDrainProvider", "NodeMembershipProvider",
    "NodeReadyProvider", "NodeRegistrationProvider", "TenantVersionProvider",
]
