"""Emulator configuration (one process, N instances on consecutive ports)."""

from __future__ import annotations

from dataclasses import dataclass

from smetric.core.presets import InstancePreset, get_preset
from smetric.engine import GLOBAL_TIER_KINDS
from smetric.engine.global_tier import LOAD_MODES

DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """What ``smetric emulate`` was asked to serve.

    ``time_scale`` multiplies every modelled duration: 1.0 = as fast as the modelled instance
    (e.g. one H20), 0.1 = ten times faster. ``kv_capacity_tokens`` overrides the preset's GPU KV
    capacity (0 = from the preset). ``fail_after`` makes every instance answer 503 (and fail
    ``/health``) after that many accepted requests (0 = never).
    """

    instances: int = 1
    host: str = "127.0.0.1"
    port: int = 8000
    kv_events_port: int = 0  # 0 = no KV events; instance i publishes on kv_events_port + i
    kv_events_host: str = "127.0.0.1"
    advertise_host: str = (
        ""  # address in KV topics / instance names ("" = host; set the pod IP when binding 0.0.0.0)
    )
    preset_name: str = "qwen3-30b-h20"
    time_scale: float = 1.0
    model: str = ""  # "" = the preset's model name
    hash_seed: str = "0"
    block_size: int = 16
    kv_capacity_tokens: int = 0
    max_model_len: int = 0  # 0 = the preset model's context length
    fail_after: int = 0
    tokenizer: str = ""  # "" = the shared deterministic fallback tokenizer; else a tokenizer.json path
    global_tier: str = "none"  # none | small | full (shared by the process's instances)
    # How a global-tier load is timed: the simulator's calibrated LMCache + Mooncake path with
    # the load mode of the connector the operator renders (sync: LMCacheConnectorV1 stalls the
    # batch; async: LMCacheMPConnector parks the request), smetric.engine.global_tier.
    global_load_mode: str = "sync"
    stream_interval_s: float = 0.01
    # Cost-preserving token scale k (>= 1): each prompt/output token stands for k tokens of the
    # modelled instance, which charges time (and global-tier bytes) as for the full-size request
    # (smetric.engine.roofline). 1 = tokens are what they are. The bench sets it to 1/token scale.
    token_cost_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.instances < 1:
            raise ValueError("--instances must be >= 1")
        if not 0 < self.port < 65536 or self.port + self.instances - 1 > 65535:
            raise ValueError(f"--port {self.port} with {self.instances} instances leaves the port range")
        if self.kv_events_port and (self.kv_events_port < 1 or self.kv_events_port + self.instances > 65536):
            raise ValueError(f"--kv-events-port {self.kv_events_port} leaves the port range")
        if not self.time_scale > 0:
            raise ValueError("--time-scale must be > 0")
        if self.block_size < 1:
            raise ValueError("--block-size must be >= 1")
        if self.kv_capacity_tokens < 0 or self.max_model_len < 0 or self.fail_after < 0:
            raise ValueError("--kv-capacity-tokens, --max-model-len and --fail-after must be >= 0")
        if not self.stream_interval_s > 0:
            raise ValueError("--stream-interval-ms must be > 0")
        if not self.token_cost_scale >= 1.0:
            raise ValueError("--token-cost-scale must be >= 1")
        if self.global_tier not in GLOBAL_TIER_KINDS:
            raise ValueError(f"--global-tier must be one of {', '.join(GLOBAL_TIER_KINDS)}")
        if self.global_load_mode not in LOAD_MODES:
            raise ValueError(f"--global-load-mode must be one of {', '.join(LOAD_MODES)}")
        get_preset(self.preset_name)  # raises a clear ValueError for an unknown preset

    @property
    def preset(self) -> InstancePreset:
        return get_preset(self.preset_name)

    @property
    def model_name(self) -> str:
        return self.model or self.preset.model.name

    @property
    def context_tokens(self) -> int:
        return self.max_model_len or self.preset.model.max_context_tokens

    @property
    def capacity_tokens(self) -> int:
        tokens = self.kv_capacity_tokens or self.preset.kv_capacity_tokens
        return max(self.block_size, tokens - tokens % self.block_size)

    @property
    def num_gpu_blocks(self) -> int:
        return self.capacity_tokens // self.block_size

    def http_port(self, index: int) -> int:
        return self.port + index

    def kv_events_endpoint(self, index: int) -> str:
        """``tcp://host:port`` the instance's PUB socket binds, or "" without KV events."""
        if not self.kv_events_port:
            return ""
        return f"tcp://{self.kv_events_host}:{self.kv_events_port + index}"

    def kv_topic(self, index: int) -> str:
        """vLLM's topic convention ``kv@<pod-ip>:<port>@<model>``."""
        return f"kv@{self.public_host}:{self.http_port(index)}@{self.model_name}"

    @property
    def public_host(self) -> str:
        return self.advertise_host or self.host
