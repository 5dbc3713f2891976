"""Hardware and model presets, each number with its public source.

Nothing here is tuned to make a policy win: numbers are vendor specs or model configs; the two
efficiency factors are stated assumptions (documented below) fixed before any result was taken.

Sources
-------
* NVIDIA H20 (Hopper, 96 GB HBM3): 4.0 TB/s HBM bandwidth, 148 TFLOP/s dense FP16/BF16 tensor,
  296 TFLOP/s dense FP8, NVLink 900 GB/s -- NVIDIA H20 product brief / datasheet (2024).
* NVIDIA H20-3e: 141 GB HBM3e, 4.8 TB/s -- NVIDIA H20 3e datasheet.
* NVIDIA H200 SXM: 141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s dense BF16, NVLink 900 GB/s -- NVIDIA H200
  Tensor Core GPU datasheet (the 1,979 TFLOP/s figure there is with sparsity).
* FP8 KV cache: vLLM ``--kv-cache-dtype fp8`` (docs "Quantized KV Cache": FP8 E4M3 halves the KV
  footprint, so the pool holds twice the tokens). Modelled: 1 byte per KV element (KV traffic and
  the pool halve / double); the prefill cost model is unchanged (assumption: attention stays in
  BF16 after dequantisation).
* Tensor parallelism (``--tensor-parallel-size``): weights and the KV heads are split over the
  GPUs, so HBM, bandwidth and FLOP/s add up (already in :attr:`InstancePreset.peak_flop_s` etc.);
  the added cost is two all-reduces of the hidden state per layer (attention output and MoE/MLP
  output, Megatron-style TP as vLLM implements it), modelled in :mod:`smetric.engine.roofline` as
  ring all-reduce over NVLink (``2 (p-1)/p x bytes / (NVLink/2)`` -- 900 GB/s is the
  bidirectional figure) plus a fixed latency per all-reduce.
* Context beyond ``max_position_embeddings`` (variant ``ctx=N``): the Qwen3-Coder model card says
  262,144 tokens natively, "extendable up to 1M tokens with YaRN" (vLLM ``--hf-overrides`` rope
  scaling); modelled as a larger limit only, at the same cost model.
* ``hidden_size`` (for the all-reduce bytes): Qwen3-30B-A3B 2048, Qwen3-235B-A22B 4096
  (``config.json``).
* Global tier load throughput per GPU (``global_load_gbit_s_per_gpu = 60``, i.e. 7.5 GB/s): what a
  vLLM KV connector reading from Mooncake Store reports end to end, "~7-8 GB/s while ib_write_bw on
  the same hosts reached 196 Gbps" (kvcache-ai/Mooncake PR #3643); LMCache's own Mooncake adapter
  measures 6.40 GB/s LOAD over RDMA (LMCache PR #3018) and ~10 GB/s with batched gets (LMCache PR
  #3172). Not the NIC line rate (200 Gb/s = 25 GB/s). See docs/simulator.md, "Global tier".
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
* ``allreduce_latency_s = 10e-6``: fixed cost of one small all-reduce over NVLink inside a CUDA
  graph (only with tensor parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from smetric.core.costmodel import CostModel
from smetric.core.slo import PAPER_SLO_30B, PAPER_SLO_235B, SloConfig


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    hbm_gb: float
    hbm_tb_s: float
    bf16_tflop_s: float
    nvlink_gb_s: float = 900.0  # bidirectional, per GPU


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
    hidden_size: int = 0  # 0: no tensor-parallel all-reduce cost modelled

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
    allreduce_latency_s: float = 10e-6
    global_load_gbit_s_per_gpu: float = 60.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def peak_flop_s(self) -> float:
        return self.gpu.bf16_tflop_s * 1e12 * self.n_gpus

    @property
    def hbm_bytes_s(self) -> float:
        return self.gpu.hbm_tb_s * 1e12 * self.n_gpus

    @property
    def global_load_bytes_s(self) -> float:
        """Calibrated global-tier load throughput of the whole instance (every GPU loads its shard)."""
        return self.global_load_gbit_s_per_gpu * 1e9 / 8.0 * self.n_gpus

    @property
    def global_fetch_s_per_token(self) -> float:
        """Seconds to load one token's KV from the global tier at the calibrated throughput (what
        the router's ``global_fetch_s_per_token`` should be; not the NIC line rate)."""
        return self.model.kv_bytes_per_token / self.global_load_bytes_s

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
H200 = GpuSpec("NVIDIA-H200", hbm_gb=141.0, hbm_tb_s=4.8, bf16_tflop_s=989.0)
GPUS: dict[str, GpuSpec] = {"h20": H20, "h20-3e": H20_3E, "h200": H200}
KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}  # bytes per KV element

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
    hidden_size=2048,
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
    hidden_size=4096,
)

PRESETS: dict[str, InstancePreset] = {
    "qwen3-30b-h20": InstancePreset("qwen3-30b-h20", QWEN3_CODER_30B_A3B, H20, 1, PAPER_SLO_30B),
    "qwen3-235b-4xh20": InstancePreset("qwen3-235b-4xh20", QWEN3_235B_A22B_FP8, H20, 4, PAPER_SLO_235B),
}


def variant_name(
    base: str,
    *,
    kv_dtype: str = "bf16",
    tp: int | None = None,
    gpu: str | None = None,
    hbm_gb: float | None = None,
    max_context: int | None = None,
) -> str:
    """Canonical name of ``base`` with deployment options, e.g. ``qwen3-30b-h20/kv=fp8/tp=2``;
    ``base`` itself when every option is the preset's own. :func:`get_preset` parses it back."""
    parts = [base]
    if kv_dtype != "bf16":
        parts.append(f"kv={kv_dtype}")
    if tp is not None:
        parts.append(f"tp={tp}")
    if gpu is not None:
        parts.append(f"gpu={gpu}")
    if hbm_gb is not None:
        parts.append(f"hbm={hbm_gb:g}")
    if max_context is not None:
        parts.append(f"ctx={max_context}")
    return "/".join(parts)


def _variant(base: InstancePreset, name: str, options: dict[str, str]) -> InstancePreset:
    preset = base
    model, gpu = base.model, base.gpu
    if "kv" in options:
        dtype = options.pop("kv")
        if dtype not in KV_DTYPES:
            raise ValueError(f"unknown KV dtype {dtype!r}; choose one of {', '.join(KV_DTYPES)}")
        model = replace(model, kv_bytes_per_elem=KV_DTYPES[dtype])
    if "gpu" in options:
        key = options.pop("gpu")
        if key not in GPUS:
            raise ValueError(f"unknown GPU {key!r}; choose one of {', '.join(GPUS)}")
        gpu = GPUS[key]
    if "hbm" in options:
        hbm = float(options.pop("hbm"))
        if not (0 < hbm < 10_000):
            raise ValueError(f"HBM per GPU must be in (0, 10000) GB, got {hbm}")
        gpu = replace(gpu, name=f"{gpu.name}-{hbm:g}GB", hbm_gb=hbm)
    if "ctx" in options:
        ctx = int(options.pop("ctx"))
        if not 1 <= ctx <= 4 * 1024 * 1024:
            raise ValueError(f"max context must be 1..4M tokens, got {ctx}")
        model = replace(model, max_context_tokens=ctx)
    n_gpus = base.n_gpus
    if "tp" in options:
        n_gpus = int(options.pop("tp"))
        if not 1 <= n_gpus <= 8:
            raise ValueError(f"tensor parallel size must be 1..8, got {n_gpus}")
    if options:
        raise ValueError(f"unknown preset options {sorted(options)} in {name!r}")
    preset = replace(base, name=name, model=model, gpu=gpu, n_gpus=n_gpus)
    preset.kv_capacity_tokens  # noqa: B018 -- raises if the weights do not fit
    return preset


def get_preset(name: str) -> InstancePreset:
    """A preset by name, or a variant ``base/kv=fp8/tp=2/gpu=h200/hbm=141`` (see :func:`variant_name`)."""
    base_name, *opts = name.split("/")
    try:
        base = PRESETS[base_name]
    except KeyError:
        raise ValueError(
            f"unknown instance preset {base_name!r}; known: {', '.join(sorted(PRESETS))}"
        ) from None
    if not opts:
        return base
    options: dict[str, str] = {}
    for o in opts:
        key, sep, value = o.partition("=")
        if not sep or not value or key in options:
            raise ValueError(f"bad preset option {o!r} in {name!r}")
        options[key] = value
    try:
        return _variant(base, name, options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"preset {name!r}: {exc}") from None
