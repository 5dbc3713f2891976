"""Roofline step-time model of one vLLM V1 engine step (decodes + chunked-prefill chunks).

One step of a continuous-batching engine streams the weights it touches and the KV it reads, and
performs the FLOPs of every token in the batch. Its time is the roofline of the two, plus a fixed
launch overhead::

    step_s = overhead_s + max(bytes / (hbm_bytes_s * hbm_efficiency),
                              decode_flops / (peak_flop_s * mfu) + sum(prefill chunk costs))

* bytes = shared (non-expert) weights + expected distinct experts touched by the step's tokens x
  bytes per expert + KV read (context tokens of every decode, plus the already-computed context of
  every prefill chunk) x ``kv_bytes_per_token``.
* Expected distinct experts for ``t`` tokens under uniform top-k routing (an assumption: real
  routers are skewed, which touches fewer experts):  ``E * (1 - (1 - k/E) ** t)``.
* The split between expert and shared parameters is derived from the preset's own numbers: with
  ``E`` experts, ``k`` active, ``total = shared + E*e`` and ``active = shared + k*e``, so
  ``e = (total - active) / (E - k)`` -- no new constant.
* Decode FLOPs: ``2 * active_params`` per token plus attention ``4 * layers * q_heads * head_dim``
  per (token, context token) pair; at the same MFU assumption as prefill.
* Prefill chunk compute comes from the project's cost model (paper Eq. 1, preset.cost_model):
  ``chunk_cost(start, chunk)`` seconds.
* Tensor parallelism (``n_gpus = p > 1``): every step adds ``2 x layers`` all-reduces of the
  step's hidden states (attention output and MoE output), not overlapped with compute:
  ``2 L (latency + t x hidden x 2 B x 2 (p-1)/p / (NVLink / 2))`` for ``t`` tokens (ring
  all-reduce; NVLink's datasheet figure is bidirectional).

Every input is a field of :class:`smetric.core.presets.InstancePreset` (sources there).

Cost-preserving token scale (``token_cost_scale = k >= 1``, :meth:`StepModel.token_scaled`): an
emulated bench replays prompts shrunk by ``1/k`` so that the client, Envoy and the picker move and
hash ``k`` times fewer bytes, but each scaled token stands for ``k`` tokens of the modelled
instance, so the engine charges time as for the full-size request. One scaled step of a chunk of
``c`` scaled tokens and ``d`` decodes stands for ``k`` real steps, each with a ``c``-token chunk
(so the scheduler's token budget is unchanged) and the same ``d`` decodes, every context ``k``
times longer; a chunk's compute is the cost model's over the ``k`` times longer token range. With
``k = 1`` every method is the plain model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from smetric.core.costmodel import CostModel
from smetric.core.presets import InstancePreset


@dataclass(frozen=True, slots=True)
class StepModel:
    """Step-time model of one instance kind. Build it with :meth:`from_preset`."""

    overhead_s: float
    bytes_per_s: float  # effective HBM bandwidth (peak x efficiency)
    flop_per_s: float  # effective FLOP/s for decode GEMMs (peak x mfu)
    shared_weight_bytes: float
    expert_bytes: float  # one expert, all layers
    n_experts: int
    n_active_experts: int
    kv_bytes_per_token: float
    flops_per_token: float  # linear layers, per token
    attn_flops_per_pair: float  # attention, per (new token, context token) pair
    cost_model: CostModel
    allreduce_fixed_s: float = 0.0  # per step (tensor parallelism only)
    allreduce_s_per_token: float = 0.0
    token_cost_scale: float = 1.0  # k: modelled tokens per scaled token (module docstring)

    def token_scaled(self, k: float) -> StepModel:
        """This model with each token standing for ``k`` modelled tokens (``k >= 1``)."""
        if not k >= 1.0:
            raise ValueError(f"token_cost_scale must be >= 1, got {k}")
        rescale = k / self.token_cost_scale  # the cost model carries the current scale
        return replace(self, token_cost_scale=float(k), cost_model=self.cost_model.token_scaled(rescale))

    @staticmethod
    def from_preset(preset: InstancePreset) -> StepModel:
        m = preset.model
        expert_bytes = 0.0
        if m.n_experts > m.n_active_experts > 0:
            e_params_b = (m.total_params_b - m.active_params_b) / (m.n_experts - m.n_active_experts)
            expert_bytes = e_params_b * 1e9 * m.weight_bytes_per_param
        shared_bytes = m.weight_bytes - expert_bytes * m.n_experts
        ar_fixed = ar_token = 0.0
        p = preset.n_gpus
        if p > 1 and m.hidden_size > 0:
            n_ar = 2 * m.n_layers
            ar_fixed = n_ar * preset.allreduce_latency_s
            link_bytes_s = preset.gpu.nvlink_gb_s * 1e9 / 2.0
            ar_token = n_ar * m.hidden_size * 2.0 * 2.0 * (p - 1) / p / link_bytes_s
        return StepModel(
            overhead_s=preset.step_overhead_s,
            bytes_per_s=preset.hbm_bytes_s * preset.hbm_efficiency,
            flop_per_s=preset.peak_flop_s * preset.prefill_mfu,
            shared_weight_bytes=shared_bytes,
            expert_bytes=expert_bytes,
            n_experts=m.n_experts,
            n_active_experts=m.n_active_experts,
            kv_bytes_per_token=m.kv_bytes_per_token,
            flops_per_token=m.flops_per_token,
            attn_flops_per_pair=4.0 * m.n_layers * m.n_q_heads * m.head_dim,
            cost_model=preset.cost_model,
            allreduce_fixed_s=ar_fixed,
            allreduce_s_per_token=ar_token,
        )

    def weight_bytes(self, n_tokens: int) -> float:
        """Weight bytes streamed by a step over ``n_tokens`` tokens (MoE: distinct experts touched)."""
        if n_tokens <= 0:
            return 0.0
        if self.n_experts == 0:
            return self.shared_weight_bytes
        e, k = self.n_experts, self.n_active_experts
        touched = e * (1.0 - (1.0 - k / e) ** n_tokens)
        return self.shared_weight_bytes + touched * self.expert_bytes

    def step_s(
        self,
        n_decodes: int,
        decode_context_tokens: float,
        prefill_tokens: int = 0,
        prefill_context_tokens: float = 0.0,
        prefill_cost_s: float = 0.0,
    ) -> float:
        """Time of one step.

        ``decode_context_tokens``: sum of context lengths of the decoding requests.
        ``prefill_tokens``: tokens of all prefill chunks; ``prefill_context_tokens``: KV already
        present before those chunks (read by their attention); ``prefill_cost_s``: the chunks'
        summed cost-model time (see :meth:`chunk_s`).
        """
        k = self.token_cost_scale
        if k != 1.0:  # k real steps, each with the same chunk and decodes, contexts k x longer
            return k * self._step_s(
                n_decodes,
                decode_context_tokens * k,
                prefill_tokens,
                prefill_context_tokens * k,
                prefill_cost_s / k,
            )
        return self._step_s(
            n_decodes, decode_context_tokens, prefill_tokens, prefill_context_tokens, prefill_cost_s
        )

    def _step_s(
        self,
        n_decodes: int,
        decode_context_tokens: float,
        prefill_tokens: int,
        prefill_context_tokens: float,
        prefill_cost_s: float,
    ) -> float:
        n_tok = n_decodes + prefill_tokens
        if n_tok <= 0:
            return 0.0
        mem = (
            self.weight_bytes(n_tok)
            + (decode_context_tokens + prefill_context_tokens) * self.kv_bytes_per_token
        ) / self.bytes_per_s
        flops = n_decodes * self.flops_per_token + decode_context_tokens * self.attn_flops_per_pair
        compute = flops / self.flop_per_s + prefill_cost_s
        comm = self.allreduce_fixed_s + n_tok * self.allreduce_s_per_token
        return self.overhead_s + comm + max(mem, compute)

    def chunk_s(self, start_tokens: int, chunk_tokens: int) -> float:
        """Cost-model compute time of prefilling ``[start, start+chunk)`` (with a token scale the
        cost model is the scaled one: the compute of the ``k`` times longer range)."""
        return self.cost_model.chunk_cost(start_tokens, chunk_tokens)

    def decode_stretch_s(self, n_decodes: int, context_tokens: float, n_steps: int) -> float:
        """Total time of ``n_steps`` pure-decode steps; every step adds ``n_decodes`` context tokens.

        The step time is the maximum of two linear functions of the step index, so it is convex
        and piecewise linear; the sum is computed exactly per piece (no per-step loop).
        """
        if n_steps <= 0 or n_decodes <= 0:
            return 0.0
        k = self.token_cost_scale
        if k != 1.0:  # each scaled step is k real steps; exact for the k x longer stretch
            return self._decode_stretch_s(n_decodes, context_tokens * k, n_steps * k)
        return self._decode_stretch_s(n_decodes, context_tokens, n_steps)

    def _decode_stretch_s(self, n_decodes: int, context_tokens: float, n_steps: float) -> float:
        # step j: mem(j) = m0 + m1*j, compute(j) = c0 + c1*j
        w = self.weight_bytes(n_decodes)
        m0 = (w + context_tokens * self.kv_bytes_per_token) / self.bytes_per_s
        m1 = n_decodes * self.kv_bytes_per_token / self.bytes_per_s
        c0 = (n_decodes * self.flops_per_token + context_tokens * self.attn_flops_per_pair) / self.flop_per_s
        c1 = n_decodes * self.attn_flops_per_pair / self.flop_per_s
        total = n_steps * (self.overhead_s + self.allreduce_fixed_s + n_decodes * self.allreduce_s_per_token)
        # index where compute overtakes memory (if ever within [0, n_steps))
        lo, hi = (m0, m1), (c0, c1)
        if (c0 > m0) or (c0 == m0 and c1 > m1):
            lo, hi = hi, lo  # lo is the max at j = 0
        a0, a1 = lo
        b0, b1 = hi
        cross: float = n_steps
        if b1 > a1:
            j = (a0 - b0) / (b1 - a1)
            cross = max(0, min(n_steps, int(j) + 1))
        total += _series(a0, a1, 0, cross) + _series(b0, b1, cross, n_steps)
        return total


def _series(v0: float, v1: float, j0: float, j1: float) -> float:
    """sum_{j=j0}^{j1-1} (v0 + v1*j)."""
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * v0 + v1 * (j0 + j1 - 1) * n / 2.0
