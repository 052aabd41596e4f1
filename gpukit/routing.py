"""Skewed routing traces and an LRU model of the slot cache (the decode step calibrates its skew with it)."""

from __future__ import annotations


def zipf_routing_trace(steps: int, layers: int, experts: int, top_k: int, exponent: float, *, batch: int = 1,
                       seed: int = 0):  # fmt: skip
    """``int32 [steps, layers, batch, top_k]`` CPU tensor of expert ids: every layer has its own
    popularity order (a seeded permutation), ids ~ Zipf(exponent) over ranks, distinct per token."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, experts + 1, dtype=torch.float64)
    weights = ranks.pow(-float(exponent))
    perm = torch.stack([torch.randperm(experts, generator=g) for _ in range(layers)])  # [layers, experts]
    rows = steps * layers * batch
    picks = torch.multinomial(weights.expand(rows, experts), top_k, replacement=False, generator=g)
    picks = picks.view(steps, layers, batch, top_k)
    return perm[torch.arange(layers).view(1, layers, 1, 1).expand_as(picks), picks].to(torch.int32).contiguous()


def lru_miss_rate(trace, experts: int, cache_size: int, warm_steps: int = 0) -> float:
    """Miss rate (misses / distinct active experts per layer call) of one global LRU of
    ``cache_size`` slots over ids ``layer * experts + expert`` -- flashlib's lru_ensure policy."""
    from collections import OrderedDict

    rows = trace.tolist() if hasattr(trace, "tolist") else trace
    lru: OrderedDict[int, None] = OrderedDict()
    misses = active = 0
    for t, step in enumerate(rows):
        for layer, tokens in enumerate(step):
            uniq = list(dict.fromkeys(layer * experts + e for tok in tokens for e in tok))
            miss = [k for k in uniq if k not in lru]
            for k in uniq:
                if k in lru:
                    lru.move_to_end(k)
            for k in miss:
                if len(lru) >= cache_size:
                    lru.popitem(last=False)
                lru[k] = None
            if t >= warm_steps:
                misses += len(miss)
                active += len(uniq)
    return misses / active if active else 0.0


def calibrate_zipf(target: float, *, steps: int, layers: int, experts: int, top_k: int, cache_size: int,
                   warm_steps: int, batch: int = 1, seed: int = 0, lo: float = 0.0, hi: float = 4.0,
                   iters: int = 14) -> tuple[float, float]:  # fmt: skip
    """Bisect the Zipf exponent so the LRU model's miss rate is ``target``; returns (exponent, rate)."""
    best = (hi, 0.0)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        tr = zipf_routing_trace(steps, layers, experts, top_k, mid, batch=batch, seed=seed)
        rate = lru_miss_rate(tr, experts, cache_size, warm_steps)
        best = (mid, rate)
        lo, hi = (mid, hi) if rate > target else (lo, mid)  # above the target: not skewed enough
    return best
