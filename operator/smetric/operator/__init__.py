"""operator package."""
