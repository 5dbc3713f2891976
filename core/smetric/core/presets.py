"""Hardware and model presets, each number with its public source.

Nothing here is tuned to make a policy win: numbers are vendor specs or model configs; the two
efficiency factors are stated assumptions (documented below) fixed before any result was taken.

Sources
-------
* NVIDIA H20 (Hopper, 96 GB HBM3): 4.0 TB/s HBM bandwidth, 148 TFLOP/s dense FP16/BF16 tensor,
  296 TFLOP/s dense FP8, NVLink 900 GB/s -- NVIDIA H20 product brief / datasheet (2024).
* NVIDIA H20-3e: 141 GB HBM3e, 4.8 TB/s -- NVIDIA H20 3e datasheet.
* Qwen3-Coder-30B-A3B-Instruct ``config.json`` (Hugging Face, Qwen): 48 layers, 32 query heads,
  4 KV heads, head_dim 128, 128 experts / 8 active, 30.5 B total / 3.3 B active parameters,
  max_position_embeddings 262,144.
* Qwen3-235B-A22B-Instruct-2507-FP8 ``config.json``: 94 layers, 64 query heads, 4 KV heads,
  head_dim 128, 128 experts / 8 active, 235 B total / 22 B active parameters, FP8 weights,
  max_position_embeddings 262,144.
* ``L_eq`` (context length where attention cost equals the linear part) from the public fits
  quoted in ``shared/reference/algorithms.md``: 6.9k (30B-A3B), 13.6k (235B-A22B).
* vLLM defaults: ``gpu_memory_utilization=0.9``, block size 16 on GPU, chunked-prefill token
  budget ``max_num_batched_tokens=8192`` (V1 engine default for online serving on Hopper).

Assumptions (stated, not measured here)
---------------------------------------
* ``prefill_mfu = 0.4``: fraction of peak tensor FLOP/s achieved by MoE prefill GEMMs.
* ``hbm_efficiency = 0.8``: fraction of peak HBM bandwidth achieved by decode steps.
* ``step_overhead_s = 0.002``: fixed per-step CPU/launch overhead of a vLLM V1 step with CUDA graphs.
* ``activation_reserve_gb``: memory kept for activations / CUDA graphs, 4 GB per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smetric.core.costmodel import CostModel
from smetric.core.slo import PAPER_SLO_30B, PAPER_SLO_235B, SloConfig


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    hbm_gb: float
    hbm_tb_s: float
    bf16_tflop_s: float


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    n_layers: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    total_params_b: float
    active_params_b: float
    n_experts: int
    n_active_experts: int
    weight_bytes_per_param: float
    kv_bytes_per_elem: float
    max_context_tokens: int
    l_eq_tokens: float

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * self.kv_bytes_per_elem

    @property
    def weight_bytes(self) -> float:
        return self.total_params_b * 1e9 * self.weight_bytes_per_param

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.active_params_b * 1e9


@dataclass(frozen=True, slots=True)
class InstancePreset:
    name: str
    model: ModelSpec
    gpu: GpuSpec
    n_gpus: int
    slo: SloConfig
    gpu_memory_utilization: float = 0.9
    activation_reserve_gb: float = 4.0
    prefill_mfu: float = 0.4
    hbm_efficiency: float = 0.8
    step_overhead_s: float = 0.002
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def peak_flop_s(self) -> float:
        return self.gpu.bf16_tflop_s * 1e12 * self.n_gpus

    @property
    def hbm_bytes_s(self) -> float:
        return self.gpu.hbm_tb_s * 1e12 * self.n_gpus

    @property
    def kv_capacity_tokens(self) -> int:
        """HBM left after weights and activations, divided by KV bytes per token."""
        usable = self.gpu.hbm_gb * 1e9 * self.n_gpus * self.gpu_memory_utilization
        free = usable - self.model.weight_bytes - self.activation_reserve_gb * 1e9 * self.n_gpus
        if free <= 0:
            raise ValueError(f"{self.name}: weights do not fit in HBM")
        tokens = int(free // self.model.kv_bytes_per_token)
        return tokens - tokens % self.block_size

    @property
    def cost_model(self) -> CostModel:
        c_lin = self.model.flops_per_token / (self.peak_flop_s * self.prefill_mfu)
        return CostModel.from_l_eq(c_lin, self.model.l_eq_tokens)


H20 = GpuSpec("NVIDIA-H20", hbm_gb=96.0, hbm_tb_s=4.0, bf16_tflop_s=148.0)
H20_3E = GpuSpec("NVIDIA-H20-3e", hbm_gb=141.0, hbm_tb_s=4.8, bf16_tflop_s=148.0)

QWEN3_CODER_30B_A3B = ModelSpec(
    name="Qwen/Qwen3-Coder-30B-A3B-Instruct",
    n_layers=48,
    n_q_heads=32,
    n_kv_heads=4,
    head_dim=128,
    total_params_b=30.5,
    active_params_b=3.3,
    n_experts=128,
    n_active_experts=8,
    weight_bytes_per_param=2.0,
    kv_bytes_per_elem=2.0,
    max_context_tokens=262_144,
    l_eq_tokens=6_900.0,
)
QWEN3_235B_A22B_FP8 = ModelSpec(
    name="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    n_layers=94,
    n_q_heads=64,
    n_kv_heads=4,
    head_dim=128,
    total_params_b=235.0,
    active_params_b=22.0,
    n_experts=128,
    n_active_experts=8,
    weight_bytes_per_param=1.0,
    kv_bytes_per_elem=2.0,
    max_context_tokens=262_144,
    l_eq_tokens=13_600.0,
)

PRESETS: dict[str, InstancePreset] = {
    "qwen3-30b-h20": InstancePreset("qwen3-30b-h20", QWEN3_CODER_30B_A3B, H20, 1, PAPER_SLO_30B),
    "qwen3-235b-4xh20": InstancePreset("qwen3-235b-4xh20", QWEN3_235B_A22B_FP8, H20, 4, PAPER_SLO_235B),
}


def get_preset(name: str) -> InstancePreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown instance preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
