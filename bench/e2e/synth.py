"""The synthetic checkpoint's model: its geometry, its config.json, and its routing.

Architecture: ``Qwen3_5MoeForCausalLM``, the text-only Qwen3.5/3.6 MoE that FreeToken 0.2.1
registers (``freetoken.models.register``) and serves with ``--moe-strategy offload`` and ModelOpt
NVFP4 routed experts. So the proposal's model itself is synthesised, not a stand-in: hybrid layers
(three Gated DeltaNet layers then one gated full-attention layer), 256 experts top-8 plus a gated
shared expert, hidden 2048, moe_intermediate 512, ModelOpt NVFP4 experts (six banks, 1,781,760 B per
expert as FreeToken packs them). The dense weights (attention, DeltaNet, shared expert, routers,
norms) are bf16 at the real sizes, because their decode time is part of what the A/B measures; only
the vocabulary shrinks with ``--layers`` (see :func:`default_vocab`).

Routing is built, not left to chance. Random weights would route almost uniformly and, worse, greedy
decoding of a random model soon repeats one token, so the same experts would stay hot and nothing
would miss. Instead the residual stream stays the token's embedding (every sublayer writes back only
~1% of it), and:

* ``E[i] = g_i + mu*u``: ``g_i`` Gaussian and orthogonal to a fixed unit vector ``u``;
* LM head row ``j`` is ``g_{c^-1(j)}`` for a random cyclic permutation ``c`` of the vocabulary, so
  greedy decoding walks the cycle ``t, c(t), c(c(t)), ...``: no token repeats within ``vocab`` steps;
* router row ``e`` of layer ``l`` is ``r_e + z_le * sigma * u`` with ``r_e`` Gaussian (orthogonal to
  ``u``): after the RMSNorm, logit ``= N(0, 1) + z_le``, fresh noise for every token (a new ``g_i``);
* ``z_le = -zipf * ln(rank) * sqrt(6)/pi`` (rank 1..E of expert ``e`` in a per-layer random order):
  Zipf-like popularity, with the Gaussian noise standing in for the Gumbel noise that would make the
  top-k exactly Plackett-Luce with weights ``rank^-zipf``. ``zipf`` 0 routes uniformly.

So each decode step draws every layer's top-8 independently from one known distribution, and
:func:`miss_table` predicts the slot cache's steady-state miss rate for any slot count by running
gpukit's LRU model (flashlib's policy) on traces from that very distribution. With the default
``zipf=1.0``, 79 slots per layer (the proposal's 3164 slots over 40 layers) give ~0.09 misses per
expert lookup, ~31 slots per layer ~0.3.

Because the token path is robust by construction (the correct logit leads by ~40 standard
deviations), the generated ids do not depend on the expert bytes here: on this checkpoint
``ids_identical`` shows that both kernels decoded the same sequence, not that the gather is
byte-exact (the conformance tier shows that). The small expert outputs do reach later layers'
routers, so the exact miss counts of the two kernels are compared as well (informational).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

from suite.geometry import MODEL, nvfp4_banks

ARCHITECTURE = "Qwen3_5MoeForCausalLM"
MODEL_TYPE = "qwen3_5_moe_text"
#: FreeToken's Qwen3.5 NVFP4 expert reader only matches keys under this root (``nvfp4_expert_spec``).
ROOT = "model.language_model"
#: The sidecar the harness reads to turn ``--miss-rate`` into a slot count.
SIDECAR = "freetoken_e2e.json"
SIDECAR_SCHEMA = "freetoken-e2e-synthetic/1"
FULL_VOCAB = 248320  # Qwen3.5/3.6
NVFP4_GROUP = 16
#: Relative size of what each sublayer adds to the residual stream.
EPS = 0.01
#: The gated DeltaNet / attention layer pattern of Qwen3.5: every 4th layer is full attention.
FULL_ATTENTION_INTERVAL = 4


def default_vocab(layers: int) -> int:
    """The real vocabulary at 40 layers, scaled with the layer count (multiple of 256) so the LM head
    keeps its share of the decode step when ``--layers`` shrinks the model."""
    return max(512, int(FULL_VOCAB * layers / MODEL["moe_layers"]) // 256 * 256)


@dataclasses.dataclass(frozen=True)
class SynthSpec:
    """Geometry and seed of one synthetic checkpoint (defaults: Qwen3.6-35B-A3B)."""

    layers: int = MODEL["moe_layers"]
    experts: int = MODEL["experts"]
    top_k: int = MODEL["top_k"]
    hidden: int = MODEL["hidden"]
    moe_intermediate: int = MODEL["intermediate"]
    shared_intermediate: int = 512
    heads: int = 16
    kv_heads: int = 2
    head_dim: int = 256
    linear_k_heads: int = 16
    linear_v_heads: int = 32
    linear_head_dim: int = 128
    conv_kernel: int = 4
    vocab: int = FULL_VOCAB
    zipf: float = 1.0
    seed: int = 0
    max_position: int = 262144

    def __post_init__(self) -> None:
        rows = "a multiple of 256 (16-byte NVFP4 scale rows)"
        checks = {"layers": (self.layers >= 1, "at least 1"), "experts": (self.experts >= 2, "at least 2"),
                  "top_k": (1 <= self.top_k <= self.experts, f"1..experts ({self.experts})"),
                  "hidden": (self.hidden % 256 == 0, rows),
                  "moe_intermediate": (self.moe_intermediate % 256 == 0, rows),
                  "vocab": (self.vocab >= 259, "at least 259 (256 bytes + 3 special tokens)"),
                  "zipf": (self.zipf >= 0, ">= 0"), "linear_head_dim": (self.linear_head_dim > 0, "> 0")}  # fmt: skip
        for name, (ok, allowed) in checks.items():
            if not ok:
                raise ValueError(f"SynthSpec.{name}={getattr(self, name)!r}: must be {allowed}")

    @classmethod
    def tiny(cls, **kw: Any) -> SynthSpec:
        """A few-MB model of the same architecture and NVFP4 layout, for CPU tests and smoke runs."""
        base = {
            "layers": 4, "experts": 16, "top_k": 4, "hidden": 256, "moe_intermediate": 256, "shared_intermediate": 128,
            "heads": 2, "kv_heads": 1, "head_dim": 128, "linear_k_heads": 2, "linear_v_heads": 4, "linear_head_dim": 64,
            "vocab": 512, "max_position": 8192,
        }  # fmt: skip
        return cls(**{**base, **kw})

    @property
    def layer_types(self) -> list[str]:
        every = FULL_ATTENTION_INTERVAL
        return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(self.layers)]

    @property
    def linear_key_dim(self) -> int:
        return self.linear_k_heads * self.linear_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_v_heads * self.linear_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def bank_bytes_per_expert(self) -> int:
        """Bytes one expert takes in FreeToken's six NVFP4 banks (per-row fp32 globals, no input scales)."""
        return sum(b.row_bytes for b in nvfp4_banks(self.hidden, self.moe_intermediate))

    @property
    def bank_bytes(self) -> int:
        return self.layers * self.experts * self.bank_bytes_per_expert

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def quantization_config() -> dict[str, Any]:
    """ModelOpt NVFP4 for the routed experts only; everything else is excluded (stored bf16)."""
    return {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": NVFP4_GROUP, "kv_cache_quant_algo": None,
        "exclude_modules": [
            "lm_head", "*embed_tokens", "*.self_attn", "*.linear_attn", "*.shared_expert", "*.shared_expert_gate",
            "*.mlp.gate",
        ],
    }  # fmt: skip


def config_json(spec: SynthSpec, *, eos_token_id: int) -> dict[str, Any]:
    """The checkpoint's ``config.json`` (transformers' ``Qwen3_5MoeTextConfig`` fields)."""
    return {
        "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, "vocab_size": spec.vocab, "hidden_size": spec.hidden,
        "num_hidden_layers": spec.layers, "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim, "hidden_act": "silu", "max_position_embeddings": spec.max_position,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "linear_conv_kernel_dim": spec.conv_kernel, "linear_key_head_dim": spec.linear_head_dim,
        "linear_value_head_dim": spec.linear_head_dim, "linear_num_key_heads": spec.linear_k_heads,
        "linear_num_value_heads": spec.linear_v_heads, "moe_intermediate_size": spec.moe_intermediate,
        "shared_expert_intermediate_size": spec.shared_intermediate, "num_experts_per_tok": spec.top_k,
        "num_experts": spec.experts, "layer_types": spec.layer_types, "bos_token_id": None,
        "eos_token_id": eos_token_id, "pad_token_id": eos_token_id, "dtype": "bfloat16",
        "quantization_config": quantization_config(),
    }  # fmt: skip


def router_bias(spec: SynthSpec):
    """``float64 [layers, experts]``: the popularity term ``z`` of every router logit, in units of
    the logit noise (see the module docstring). Seeded on the CPU, so the checkpoint and the miss
    table agree whatever device generated the weights."""
    import torch

    g = torch.Generator().manual_seed(_sub_seed(spec.seed, "router_bias"))
    ranks = torch.arange(1, spec.experts + 1, dtype=torch.float64)
    by_rank = -spec.zipf * torch.log(ranks) * (math.sqrt(6.0) / math.pi)
    by_rank -= by_rank.mean()
    # per layer a random order (order[k]: the expert of rank k + 1); expert e's term is by_rank at its rank
    return torch.stack([by_rank[torch.randperm(spec.experts, generator=g).argsort()] for _ in range(spec.layers)])


def routing_trace(spec: SynthSpec, steps: int, *, seed: int = 1):
    """``int64 [steps, layers, 1, top_k]`` expert ids drawn as the checkpoint routes (batch 1)."""
    import torch

    z = router_bias(spec)
    g = torch.Generator().manual_seed(_sub_seed(spec.seed, f"trace{seed}"))
    noise = torch.randn(steps, spec.layers, spec.experts, generator=g, dtype=torch.float64)
    return (noise + z).topk(spec.top_k, dim=-1).indices.unsqueeze(2)


def miss_table(spec: SynthSpec, *, steps: int = 400, warm: int = 150, points: int = 24) -> list[list[float]]:
    """``[[slots, predicted miss rate], ...]`` (slots ascending) of one unified LRU pool in steady
    state: gpukit's model of flashlib's policy on :func:`routing_trace`. Slots start at the engine's
    floor (``experts``) and go up to every expert of every layer."""
    from gpukit.routing import lru_miss_rate

    trace = routing_trace(spec, steps).tolist()
    lo, hi = spec.experts, spec.layers * spec.experts
    grid = sorted({round(lo * (hi / lo) ** (k / (points - 1))) for k in range(points)}) if hi > lo else [lo]
    return [[s, round(lru_miss_rate(trace, spec.experts, s, warm_steps=warm), 4)] for s in grid]


def slots_for_miss_rate(table: list[list[float]], target: float) -> int:
    """The slot count whose predicted miss rate is ``target`` (linear between table points; the
    table's ends outside its range)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"miss rate {target!r}: must be in (0, 1)")
    pts = sorted((int(s), float(r)) for s, r in table)
    if target >= pts[0][1]:
        return pts[0][0]
    for (s0, r0), (s1, r1) in itertools.pairwise(pts):
        if r1 <= target <= r0:
            f = 0.0 if r0 == r1 else (r0 - target) / (r0 - r1)
            return round(s0 + f * (s1 - s0))
    return pts[-1][0]


def predicted_miss_rate(table: list[list[float]], slots: int) -> float | None:
    pts = sorted((int(s), float(r)) for s, r in table)
    if not pts or slots < pts[0][0]:
        return None
    for (s0, r0), (s1, r1) in itertools.pairwise(pts):
        if s0 <= slots <= s1:
            return round(r0 + (slots - s0) / (s1 - s0) * (r1 - r0), 4) if s1 > s0 else r0
    return pts[-1][1]


def _sub_seed(seed: int, name: str) -> int:
    """A stable 63-bit seed per (checkpoint seed, tensor name): the bytes of one tensor do not depend
    on which other tensors were generated before it."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def read_sidecar(model: str | Path) -> dict[str, Any] | None:
    """The generator's ``freetoken_e2e.json`` of a checkpoint directory, or None (a real checkpoint)."""
    path = Path(model) / SIDECAR
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("schema") == SIDECAR_SCHEMA else None
