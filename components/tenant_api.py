"""The module path of the dynamic providers in stacks created before the layered layout (commit b17a449).

Pulumi pickles a dynamic provider by reference, as its module path and class name (pulumi/sdk/python/lib/
pulumi/dynamic/dynamic.py serialize_provider, dill), and the provider host imports that path again for every
later diff, update, refresh and delete. A stack created before the move names this module.
Remove once no supported stack was created before b17a449 (CHANGELOG).
"""

from components.providers import *  # noqa: F403 -- the old pickles name five of them
