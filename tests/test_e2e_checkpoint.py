"""The synthetic checkpoint through FreeToken's own loader, on the CPU (no GPU anywhere here).

A tiny checkpoint from the same generator as the H200 run (``python -m bench.e2e make-checkpoint
--tiny``) must parse into FreeToken's model config, build FreeToken's model, and load: every dense
tensor the model declares, with its shape (``freetoken.models.load_weight``), and every routed
expert as the NVFP4 pieces the offload banks are packed from (``iter_nvfp4_expert_pieces`` under
the Qwen3.5 reader's own key pattern). Expectations come from elsewhere: the meta-device model's
state dict, the raw safetensors bytes read by the ``safetensors`` library, gpukit's NVFP4 geometry,
and gpukit's LRU model for the routing.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("freetoken.engine.config", reason="needs the patched freetoken wheel (nox -s test)")
torch = pytest.importorskip("torch")

from bench.e2e import synth
from bench.e2e.checkpoint import make_checkpoint
from bench.e2e.worker import PROMPT
from suite.geometry import NVFP4_EXPERT_BYTES
from gpukit.routing import lru_miss_rate

TINY = synth.SynthSpec.tiny(seed=7)


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("e2e") / "tiny", TINY, device="cpu")


@pytest.fixture
def ft(monkeypatch):
    """FreeToken's process-wide settings as an engine sets them (TP 1, default quant backend, rope
    tables on the CPU), restored afterwards so no other test sees them."""
    from freetoken.distributed import DistributedInfo
    from freetoken.distributed import info as tp
    from freetoken.layers import rotary
    from freetoken.layers.quantization import configs as qc
    from freetoken.layers.quantization import quant_backend as qb

    for module, name in ((tp, "_TP_INFO"), (rotary, "_ROPE_DEVICE"), (qb, "_QUANT_BACKEND"), (qc, "_QUANT_CONFIG")):
        monkeypatch.setattr(module, name, getattr(module, name))
    tp._TP_INFO = DistributedInfo(0, 1)
    rotary._ROPE_DEVICE = torch.device("cpu")
    qb._QUANT_BACKEND = qb.QuantBackend()
    yield
    rotary.get_rope.cache_clear()  # its tables were built on the CPU


def engine_config(path):
    from freetoken.distributed import DistributedInfo
    from freetoken.engine.config import EngineConfig

    return EngineConfig(
        model_path=str(path), tp_info=DistributedInfo(0, 1), dtype=torch.bfloat16, moe_strategy="offload"
    )


def test_config_parses_as_the_proposals_architecture(tiny_ckpt, ft):
    cfg = engine_config(tiny_ckpt)
    assert cfg.model_spec.model_cls == synth.ARCHITECTURE == "Qwen3_5MoeForCausalLM"
    mc = cfg.model_config
    assert (mc.num_layers, mc.num_moe_layers, mc.num_experts, mc.num_experts_per_tok) == (4, 4, 16, 4)
    assert (mc.hidden_size, mc.moe_intermediate_size, mc.vocab_size) == (256, 256, 512)
    assert mc.expert_quant == "nvfp4"
    assert [mc.is_linear_layer(i) for i in range(4)] == [True, True, True, False]
    assert cfg.active_encoders == ()


def dense_weights(path) -> dict:
    """FreeToken's dense reader over the checkpoint (after the model config installs its QuantConfig)."""
    from freetoken.models import load_weight

    _ = engine_config(path).model_config  # installs its QuantConfig, as the engine does before loading
    return dict(load_weight(str(path), torch.device("cpu"), include_moe_experts=False, include_vision=False))


def test_dense_weights_load_into_the_model(tiny_ckpt, ft):
    from freetoken.models import create_model
    from freetoken.utils import torch_dtype

    cfg = engine_config(tiny_ckpt)
    with torch.device("meta"), torch_dtype(torch.bfloat16):
        model = create_model(cfg.model_config)
    want = model.state_dict()
    got = dense_weights(tiny_ckpt)
    assert set(got) == set(want)
    for key, param in want.items():
        assert tuple(got[key].shape) == tuple(param.shape), key
        assert torch.isfinite(got[key].float()).all(), key
    # the routed experts are not dense weights: the offload layers hold none
    assert not any(".experts." in k for k in got)


def test_expert_pieces_are_the_files_bytes(tiny_ckpt, ft):
    import safetensors
    from freetoken.models.nvfp4_banks import iter_nvfp4_expert_pieces
    from freetoken.models.qwen3_5_moe.weight import nvfp4_expert_spec

    cfg = engine_config(tiny_ckpt)
    mc = cfg.model_config
    pieces = list(iter_nvfp4_expert_pieces(str(tiny_ckpt), mc, nvfp4_expert_spec(str(tiny_ckpt), mc), parallel=False))
    assert sorted((layer, expert) for layer, expert, _, _ in pieces) == [(l, e) for l in range(4) for e in range(16)]
    index = json.loads((tiny_ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    roles = {"weight": "", "weight_scale": "_scale", "weight_scale_2": "_global", "input_scale": "_input"}
    for layer, expert, _, piece in pieces[::13]:
        assert len(piece) == 12
        for proj, role in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            for kind, suffix in roles.items():
                name = f"{synth.ROOT}.layers.{layer}.mlp.experts.{expert}.{proj}.{kind}"
                with safetensors.safe_open(str(tiny_ckpt / index[name]), framework="pt") as f:
                    raw = f.get_tensor(name)
                got = piece[role + suffix]
                assert got.shape[0] == 1
                assert torch.equal(got.reshape(-1).view(torch.uint8), raw.reshape(-1).contiguous().view(torch.uint8)), (
                    name
                )
    scales = pieces[0][3]["gate_scale"].view(torch.uint8)
    assert int(scales.min()) >= 0x30 and int(scales.max()) < 0x40  # finite e4m3 block scales, no NaN codes


def test_full_geometry_packs_to_the_proposals_bytes_per_expert(tmp_path, ft):
    """The default spec is Qwen3.6-35B-A3B: FreeToken's NVFP4 kernel lays one expert out in 1,781,760 B."""
    from freetoken.engine.engine import offload_expert_method

    spec = synth.SynthSpec()
    (tmp_path / "config.json").write_text(json.dumps(synth.config_json(spec, eos_token_id=256)))
    cfg = engine_config(tmp_path)
    mc = cfg.model_config
    assert (mc.num_moe_layers, mc.num_experts, mc.num_experts_per_tok, mc.hidden_size) == (40, 256, 8, 2048)
    layout = offload_expert_method(cfg).layout()
    banks = {k: v for k, v in layout.items() if not v.resident}
    assert len(banks) == 6
    nbytes = sum(torch.Size(v.shape).numel() * torch.empty((), dtype=v.dtype).element_size() for v in banks.values())
    assert nbytes == spec.bank_bytes_per_expert == NVFP4_EXPERT_BYTES == 1781760


def test_tokenizer_loads_offline_through_freetoken(tiny_ckpt):
    from freetoken.utils import load_eos_token_ids, load_tokenizer

    tok = load_tokenizer(str(tiny_ckpt))
    ids = tok.encode(PROMPT)
    assert ids == list(PROMPT.encode())  # byte-level, no merges
    assert load_eos_token_ids(str(tiny_ckpt), tok) == {256}
    assert json.loads((tiny_ckpt / "config.json").read_text())["eos_token_id"] == 256


def test_routing_is_the_one_the_miss_table_predicts(tiny_ckpt, ft):
    """Greedy decoding walks one cycle through the whole vocabulary, and the routers' top-k along
    that walk (from the loaded tensors) misses the LRU cache as the sidecar's table says."""
    w = dense_weights(tiny_ckpt)
    emb = w["model.embed_tokens.weight"].float()
    x = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + 1e-6)  # the (1 + 0)-weighted RMSNorm
    nxt = (x @ w["lm_head.weight"].float().T).argmax(-1).tolist()
    walk, seen = [0], {0}
    while nxt[walk[-1]] not in seen:
        walk.append(nxt[walk[-1]])
        seen.add(walk[-1])
    assert len(walk) == TINY.vocab and nxt[walk[-1]] == 0  # one cycle over every token
    routers = [w[f"model.layers.{layer}.mlp.gate.weight"].float() for layer in range(TINY.layers)]
    trace = [[[(x[t] @ r.T).topk(TINY.top_k).indices.tolist()] for r in routers] for t in walk]
    table = json.loads((tiny_ckpt / synth.SIDECAR).read_text())["miss_table"]
    checked = 0
    for slots, predicted in table:
        if 0.05 < predicted < 0.5:
            assert lru_miss_rate(trace, TINY.experts, int(slots), warm_steps=150) == pytest.approx(predicted, abs=0.04)
            checked += 1
    assert checked >= 3


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    spec = synth.SynthSpec.tiny(seed=7, layers=1)
    a = make_checkpoint(tmp_path / "a", spec, device="cpu")
    b = make_checkpoint(tmp_path / "b", spec, device="cpu")
    c = make_checkpoint(tmp_path / "c", synth.SynthSpec.tiny(seed=8, layers=1), device="cpu")
    shard = "model-00002-of-00002.safetensors"
    assert (a / shard).read_bytes() == (b / shard).read_bytes() != (c / shard).read_bytes()
    before = (a / shard).stat().st_mtime_ns
    assert make_checkpoint(a, spec, device="cpu") == a and (a / shard).stat().st_mtime_ns == before  # reused
    with pytest.raises(FileExistsError, match="another spec.*--force"):
        make_checkpoint(a, synth.SynthSpec.tiny(seed=9, layers=1), device="cpu")
    (a / shard).unlink()
    with pytest.raises(FileExistsError, match="shards missing"):
        make_checkpoint(a, spec, device="cpu")
    assert (
        make_checkpoint(a, spec, device="cpu", force=True) == a and (a / shard).read_bytes() == (b / shard).read_bytes()
    )
