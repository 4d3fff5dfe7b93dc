"""The validated stack configuration (`gpu-tenancy:*` Pulumi config keys)."""

from .models import GpuCard, Management, Quota, SmokeTest, StackConfig, Tenant, Versions, Worker
from .source import read_stack_config
from .validate import ConfigError, ConfigIssue, load_stack_config

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "GpuCard",
    "Management",
    "Quota",
    "SmokeTest",
    "StackConfig",
    "Tenant",
    "Versions",
    "Worker",
    "load_stack_config",
    "read_stack_config",
]
