"""Worker layer: container and SSH workers, how the host reaches them, their join."""
