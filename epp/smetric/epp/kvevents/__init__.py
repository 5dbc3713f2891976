"""KV-cache events: vLLM's ZMQ publisher stream decoded into per-endpoint GPU block sets."""
