"""Prometheus scraping of the model servers' ``/metrics`` into :class:`EngineMetrics`."""
