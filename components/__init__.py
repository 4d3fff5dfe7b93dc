"""The five layers of the platform, one ComponentResource per module."""
