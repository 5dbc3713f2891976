"""Prefix indexes implementing :class:`smetric.epp.contracts.PrefixIndex` (precise and approximate)."""
