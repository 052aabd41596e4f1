"""Write the synthetic checkpoint: HF layout, safetensors shards, a local byte-level tokenizer.

``python -m bench.e2e make-checkpoint DIR [--layers N --experts E --seed S --device cuda|cpu --tiny]``

Weights are drawn on the GPU when there is one (~23 GB for the full model), one shard per decoder layer plus
one for the embedding and LM head, written as they are made. Every tensor's generator is seeded by ``(seed,
tensor name)``: the same seed on the same device type writes the same bytes (``generated_on`` in the sidecar).
The safetensors files are written directly (8-byte header length, JSON header, raw bytes), so a layer's
experts go out as slices of a few stacked arrays. Nothing here is committed.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from bench.e2e.synth import (EPS, ROOT, SIDECAR, SIDECAR_SCHEMA, SynthSpec, _sub_seed, config_json, miss_table,
                             read_sidecar, router_bias)  # fmt: skip

#: fp4 e2m1 codes drawn uniformly: RMS of the 16 values {0, 0.5, 1, 1.5, 2, 3, 4, 6} x sign.
E2M1_RMS = math.sqrt((0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8)
#: Block-scale bytes: e4m3 0x30..0x3F, i.e. 0.5 .. 1.875 (finite, no NaN codes); their RMS.
SCALE_LO, SCALE_HI = 0x30, 0x40
SCALE_RMS = 1.2
#: RMS of silu(a) * b for a, b ~ N(0, 1) (the gated MLPs' activation).
ACT_RMS = 0.6
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


log = logging.getLogger(__name__).info  # the messages; main() sets their format


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, the alphabet of a byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]  # the others, to 256, 257, ... in byte order
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + k) for k, b in enumerate(rest)}}


def write_tokenizer(out: Path, vocab_size: int) -> int:
    """A byte-level BPE with no merges: ids 0..255 are the bytes, then the special tokens, then
    filler entries up to ``vocab_size`` so every id the model can emit decodes. Built with the
    ``tokenizers`` library, offline. Returns the end-of-text id."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = _bytes_to_unicode()
    vocab = {chars[b]: b for b in range(256)} | {tok: 256 + i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"<|x{i}|>": i for i in range(256 + len(SPECIAL_TOKENS), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.save(str(out / "tokenizer.json"))
    eos = vocab[SPECIAL_TOKENS[0]]
    # a chat template of its own, so nothing looks for chat_template.json on the Hub
    eot = SPECIAL_TOKENS[0]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eot, "pad_token": eot, "bos_token": None,
              "model_max_length": 1 << 20,
              "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}  # fmt: skip
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "do_sample": False}) + "\n")
    return eos


class Entry(NamedTuple):
    """One tensor of a shard: name, safetensors dtype, shape, and its bytes (a uint8 numpy array)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: Any


def write_safetensors(path: Path, entries: list[Entry]) -> int:
    """Write ``entries`` as one safetensors file (header 8-byte aligned); returns the data bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.data.nbytes]}
        offset += e.data.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for e in entries:
            f.write(memoryview(e.data))
    tmp.replace(path)
    return offset


_DTYPES = {"bfloat16": "BF16", "float32": "F32", "uint8": "U8"}


def _entry(name: str, t, dtype: str | None = None) -> Entry:
    """A torch tensor (any device) as an Entry; uint8 tensors may be declared ``F8_E4M3``."""
    import torch

    host = t.detach().contiguous().cpu()
    st_dtype = dtype or _DTYPES[str(host.dtype).removeprefix("torch.")]
    return Entry(name, st_dtype, tuple(host.shape), host.reshape(-1).view(torch.uint8).numpy())


class Generator:
    """Draws the checkpoint's tensors on ``device``, each from its own seeded generator."""

    def __init__(self, spec: SynthSpec, device: str) -> None:
        import torch

        self.spec, self.device = spec, torch.device(device)
        self.torch = torch
        h = spec.hidden
        u = torch.randn(h, generator=self._cpu_gen("u"), dtype=torch.float64)
        self.u = (u / u.norm()).to(torch.float32).to(self.device)
        self.mu = math.sqrt(h)  # the shared component's norm: as large as a token's own part
        self.sigma_r = math.sqrt(2.0 / h)  # router rows: unit-variance logit noise after the RMSNorm
        self.x_rms = math.sqrt(2.0)  # RMS of an embedding row g_i + mu * u
        self.z = router_bias(spec)  # [layers, experts], CPU float64

    @staticmethod
    def device_type(device: str) -> str:
        import torch

        return torch.device(device).type

    def _cpu_gen(self, name: str):
        return self.torch.Generator().manual_seed(_sub_seed(self.spec.seed, name))

    def _gen(self, name: str):
        return self.torch.Generator(device=self.device).manual_seed(_sub_seed(self.spec.seed, name))

    def randn(self, name: str, *shape: int, std: float = 1.0):
        t = self.torch.randn(*shape, generator=self._gen(name), device=self.device, dtype=self.torch.float32)
        return t.mul_(std)

    def _orth(self, t):
        """Rows of ``t`` with their component along ``u`` removed (in place)."""
        t -= (t @ self.u).unsqueeze(1) * self.u.unsqueeze(0)
        return t

    def bf16(self, name: str, *shape: int, std: float) -> Entry:
        return _entry(name, self.randn(name, *shape, std=std).to(self.torch.bfloat16))

    def const(self, name: str, shape: tuple[int, ...], value: float, dtype) -> Entry:
        return _entry(name, self.torch.full(shape, value, dtype=dtype))

    def head_entries(self, chunk_rows: int = 16384) -> list[Entry]:
        """Embedding ``g_i + mu*u``, LM head ``g`` permuted along the token cycle, final norm."""
        torch, s = self.torch, self.spec
        order = torch.randperm(s.vocab, generator=self._cpu_gen("cycle"))  # cycle: order[k] -> order[k+1]
        emb = torch.empty(s.vocab, s.hidden, dtype=torch.bfloat16)
        head = torch.empty(s.vocab, s.hidden, dtype=torch.bfloat16)
        dst = order.roll(-1)  # head row of the token that follows order[k]
        for start in range(0, s.vocab, chunk_rows):
            rows = min(chunk_rows, s.vocab - start)
            g = self._orth(self.randn(f"embed{start}", rows, s.hidden))
            head[dst[start : start + rows]] = g.to(torch.bfloat16).cpu()
            emb[order[start : start + rows]] = (g + self.mu * self.u).to(torch.bfloat16).cpu()
        return [_entry(f"{ROOT}.embed_tokens.weight", emb), _entry("lm_head.weight", head),
                self.const(f"{ROOT}.norm.weight", (s.hidden,), 0.0, torch.bfloat16)]  # fmt: skip

    def layer_entries(self, layer: int) -> list[Entry]:
        torch, s = self.torch, self.spec
        h, p = s.hidden, f"{ROOT}.layers.{layer}"
        out_std = lambda fan_in, in_rms: EPS * self.x_rms / (in_rms * math.sqrt(fan_in))
        norms = ("input_layernorm", "post_attention_layernorm")
        e = [self.const(f"{p}.{n}.weight", (h,), 0.0, torch.bfloat16) for n in norms]
        if s.layer_types[layer] == "linear_attention":
            a = f"{p}.linear_attn"
            gen = self._gen(f"{a}.A_log")
            a_log = torch.rand(s.linear_v_heads, generator=gen, device=self.device).mul_(15).add_(1).log_()
            e += [
                self.bf16(f"{a}.in_proj_qkv.weight", s.conv_dim, h, std=1 / math.sqrt(h)),
                self.bf16(f"{a}.in_proj_z.weight", s.linear_value_dim, h, std=1 / math.sqrt(h)),
                self.bf16(f"{a}.in_proj_b.weight", s.linear_v_heads, h, std=1 / math.sqrt(h)),
                self.bf16(f"{a}.in_proj_a.weight", s.linear_v_heads, h, std=1 / math.sqrt(h)),
                _entry(f"{a}.conv1d.weight", self.randn(f"{a}.conv1d", s.conv_dim, 1, s.conv_kernel,
                                                        std=0.5 / math.sqrt(s.conv_kernel)).to(torch.bfloat16)),
                _entry(f"{a}.A_log", a_log),
                self.const(f"{a}.dt_bias", (s.linear_v_heads,), 1.0, torch.float32),
                self.const(f"{a}.norm.weight", (s.linear_head_dim,), 1.0, torch.bfloat16),
                self.bf16(f"{a}.out_proj.weight", h, s.linear_value_dim, std=out_std(s.linear_value_dim, ACT_RMS)),
            ]  # fmt: skip
        else:
            a, qd, kvd = f"{p}.self_attn", s.heads * s.head_dim, s.kv_heads * s.head_dim
            e += [
                self.bf16(f"{a}.q_proj.weight", 2 * qd, h, std=1 / math.sqrt(h)),  # query | output gate
                self.bf16(f"{a}.k_proj.weight", kvd, h, std=1 / math.sqrt(h)),
                self.bf16(f"{a}.v_proj.weight", kvd, h, std=1 / math.sqrt(h)),
                self.bf16(f"{a}.o_proj.weight", h, qd, std=out_std(qd, 0.5)),
                self.const(f"{a}.q_norm.weight", (s.head_dim,), 0.0, torch.bfloat16),
                self.const(f"{a}.k_norm.weight", (s.head_dim,), 0.0, torch.bfloat16),
            ]
        m, si = f"{p}.mlp", s.shared_intermediate
        router = self._orth(self.randn(f"{m}.gate", s.experts, h, std=self.sigma_r))
        # + beta_e * u with beta_e = z_e * x_rms / mu: logit = N(0, 1) + z_e after the RMSNorm
        beta = self.z[layer].to(torch.float32).to(self.device) * (self.x_rms / self.mu)
        router += beta.unsqueeze(1) * self.u.unsqueeze(0)
        e += [
            _entry(f"{m}.gate.weight", router.to(torch.bfloat16)),
            self.bf16(f"{m}.shared_expert.gate_proj.weight", si, h, std=1 / math.sqrt(h)),
            self.bf16(f"{m}.shared_expert.up_proj.weight", si, h, std=1 / math.sqrt(h)),
            self.bf16(f"{m}.shared_expert.down_proj.weight", h, si, std=out_std(si, ACT_RMS)),
            self.const(f"{m}.shared_expert_gate.weight", (1, h), 0.0, torch.bfloat16),
        ]
        return e

    def expert_entries(self, layer: int) -> Iterator[Entry]:
        """The layer's experts in the ModelOpt NVFP4 layout, expert by expert (as a real export
        stores them): e2m1 codes uniform, block scales 0.5..1.875, per-tensor globals that keep
        the routed output ~EPS of the residual stream, static activation scales."""
        torch, s = self.torch, self.spec
        h, i, n = s.hidden, s.moe_intermediate, s.experts
        p = f"{ROOT}.layers.{layer}.mlp.experts"
        g_in = 1.0 / (E2M1_RMS * SCALE_RMS * math.sqrt(h))  # gate/up pre-activations ~ N(0, 1)
        g_down = EPS * self.x_rms / (E2M1_RMS * SCALE_RMS * math.sqrt(i) * ACT_RMS)
        input_scale = 4.0 / (6.0 * 448.0)  # amax ~4 of a normalised activation, ModelOpt's convention
        stacked = {}
        for proj, (rows, cols), glob in (("gate_proj", (i, h), g_in), ("up_proj", (i, h), g_in),
                                         ("down_proj", (h, i), g_down)):  # fmt: skip
            name = f"{p}.{proj}"
            codes = torch.randint(0, 256, (n, rows, cols // 2), generator=self._gen(f"{name}.weight"),
                                  device=self.device, dtype=torch.uint8)  # fmt: skip
            scales = torch.randint(SCALE_LO, SCALE_HI, (n, rows, cols // 16), generator=self._gen(f"{name}.scale"),
                                   device=self.device, dtype=torch.uint8)  # fmt: skip
            jitter = torch.rand(n, generator=self._gen(f"{name}.global"), device=self.device).mul_(0.4).add_(0.8)
            stacked[proj] = (
                codes.cpu().numpy(), scales.cpu().numpy(),
                jitter.mul_(glob).cpu().numpy(), torch.full((n,), input_scale).numpy(),
            )  # fmt: skip
        for x in range(n):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                codes, scales, globs, acts = stacked[proj]
                name = f"{p}.{x}.{proj}"
                yield Entry(f"{name}.weight", "U8", codes.shape[1:], codes[x])
                yield Entry(f"{name}.weight_scale", "F8_E4M3", scales.shape[1:], scales[x])
                yield Entry(f"{name}.weight_scale_2", "F32", (), globs[x : x + 1].view("uint8"))
                yield Entry(f"{name}.input_scale", "F32", (), acts[x : x + 1].view("uint8"))


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def make_checkpoint(out: Path, spec: SynthSpec, *, device: str | None = None, force: bool = False) -> Path:
    """Write the checkpoint of ``spec`` into ``out`` (created; refused when it holds a checkpoint
    already, unless ``force``). Returns ``out``."""
    out = Path(out)
    device = device or default_device()
    if (out / "config.json").exists() and not force:
        if why := _reuse_mismatch(out, spec, device):
            raise FileExistsError(f"{out} already holds a checkpoint ({why}); pass --force to overwrite it")
        log(f"{out} already holds this checkpoint ({_describe(spec)}, drawn on {device}); reusing it")
        return out
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("model-*.safetensors"):
        stale.unlink()
    t0 = time.perf_counter()
    log(f"writing {_describe(spec)} to {out} (weights drawn on {device})")
    gen = Generator(spec, device)
    eos = write_tokenizer(out, spec.vocab)
    shards = spec.layers + 1
    weight_map: dict[str, str] = {}
    total = 0

    def emit(k: int, what: str, entries: Iterable[Entry]) -> None:
        nonlocal total
        t = time.perf_counter()
        entries = list(entries)
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        n = write_safetensors(out / name, entries)
        weight_map.update((e.name, name) for e in entries)
        total += n
        dt = time.perf_counter() - t
        log(f"shard {k + 1}/{shards} ({what}): {n / 2**20:.0f} MiB in {dt:.1f} s "
            f"({n / 2**20 / max(dt, 1e-9):.0f} MiB/s); {total / 2**30:.2f} GiB so far")  # fmt: skip

    emit(0, "embedding, LM head, final norm", gen.head_entries())
    for layer in range(spec.layers):
        emit(layer + 1, f"layer {layer} {spec.layer_types[layer]}",
             [*gen.layer_entries(layer), *gen.expert_entries(layer)])
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    (out / "config.json").write_text(json.dumps(config_json(spec, eos_token_id=eos), indent=1) + "\n")
    log("simulating the slot cache's miss rate over slot counts (gpukit.routing LRU model) ...")
    table = miss_table(spec)
    sidecar = {"schema": SIDECAR_SCHEMA, "generator": "python -m bench.e2e make-checkpoint", "spec": spec.to_json(),
               "generated_on": str(gen.device.type), "bank_bytes_per_expert": spec.bank_bytes_per_expert,
               "checkpoint_bytes": total, "eos_token_id": eos, "miss_table": table,
               "miss_table_note": "[slots, predicted steady-state misses per expert lookup] of one unified LRU pool",
               }  # fmt: skip
    (out / SIDECAR).write_text(json.dumps(sidecar, indent=1) + "\n")
    log(f"done: {total / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s; miss table {_table_line(table)}")
    return out


def _reuse_mismatch(out: Path, spec: SynthSpec, device: str) -> str | None:
    """Why the checkpoint in ``out`` is not the one ``spec`` on ``device`` would write (None: it is)."""
    side = read_sidecar(out)
    if side is None:
        return f"no {SIDECAR}: not made by this generator"
    if side.get("spec") != spec.to_json():
        return f"another spec: {side.get('spec')}"
    if side.get("generated_on") != Generator.device_type(device):
        return f"drawn on {side.get('generated_on')}, not {device}"
    try:
        shards = set(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"].values())
    except (OSError, ValueError, KeyError):
        return "no readable model.safetensors.index.json"
    missing = sorted(s for s in shards if not (out / s).is_file())
    return f"shards missing: {missing[:3]}" if missing else None


def _describe(spec: SynthSpec) -> str:
    return (f"{spec.layers} layers x {spec.experts} experts (top-{spec.top_k}, "
            f"{spec.bank_bytes_per_expert:,} B per expert, {spec.bank_bytes / 2**30:.1f} GiB of experts), "
            f"hidden {spec.hidden}, vocab {spec.vocab}, zipf {spec.zipf}, seed {spec.seed}")  # fmt: skip


def _table_line(table: list[list[float]]) -> str:
    picks = table[:: max(1, len(table) // 6)]
    return ", ".join(f"{int(s)} slots -> {r:.3f}" for s, r in picks)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python -m bench.e2e make-checkpoint DIR")
