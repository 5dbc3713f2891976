"""Endpoint discovery: a static list (standalone mode) or an InferencePool v1 watch (Kubernetes)."""
