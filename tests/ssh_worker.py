"""Test data for workers reached over SSH (shared by several test modules)."""

from __future__ import annotations

from config.models import SshConnection

# Shape-valid for the config model; pulumi-command never parses it under mocks.
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
# A line of the key that must never show up in clear text anywhere.
PRIVATE_KEY_BODY = PRIVATE_KEY.splitlines()[1]

SSH_HOST = "gpu-1.example.net"


def ssh_connection(user: str = "ops", host: str = SSH_HOST, port: int = 2222) -> SshConnection:
    return SshConnection(host=host, user=user, port=port, privateKey=PRIVATE_KEY)


def ssh_worker_config(name: str = "gpu-1", user: str = "ops", gpus: list | None = None) -> dict:
    """A `workers[]` entry as a user writes it in the stack config."""
    entry: dict = {
        "name": name,
        "ssh": {"host": SSH_HOST, "user": user, "port": 2222, "privateKey": PRIVATE_KEY},
    }
    if gpus:
        entry["gpus"] = gpus
    return entry
