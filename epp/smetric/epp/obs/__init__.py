"""Picker observability: Prometheus metrics, grpc.health.v1, structured logs."""
