"""epp package."""
