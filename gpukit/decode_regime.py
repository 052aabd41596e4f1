"""The decode regime: per-layer gather timings as a decode step meets them (bench/README.md).

A decode step misses different experts every token over a bank set far larger than any cache; replaying ONE
miss list warms what a step finds cold (the host pages' address translations, above all). So here the banks
have the model's footprint, allocated as FreeToken's ``HostBank`` does (mmap, fill, ``cudaHostRegister``); a
captured graph copies ``n`` rows in every layer from its own banks and miss list; ``regime="decode"`` writes a
new list before EVERY replay (each layer's next rows of its own permutation, fresh slots), ``"replay"`` replays
one (the flattering figure, labelled); every replay is timed alone, verified byte-exact and poisoned again.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence

from suite.geometry import MODEL, NVFP4_ROW_BYTES, REGIMES, fmt_bytes
from gpukit.memory import SlotCache, check_slot_cache
from suite.rounds import Rounds, run_rounds
from gpukit.timing import bench

#: Slots of the slot cache (the proposal's decode run held 3164 experts in VRAM).
SLOTS = 3164
POISON = 0xA5


@dataclasses.dataclass(frozen=True)
class Footprint:
    """The host banks' shape: ``layers`` x ``experts`` rows of ``row_bytes`` per bank."""

    layers: int = MODEL["moe_layers"]
    experts: int = MODEL["experts"]
    row_bytes: tuple[int, ...] = tuple(NVFP4_ROW_BYTES)

    @property
    def nbytes(self) -> int:
        return self.layers * self.experts * sum(self.row_bytes)

    def describe(self) -> dict:
        return {"layers": self.layers, "experts": self.experts, "row_bytes": list(self.row_bytes), "bytes": self.nbytes,
                "full": self == Footprint()}  # fmt: skip

    @classmethod
    def scaled(cls, gib: float | None) -> "Footprint":
        """The full footprint, or fewer layers so the banks take at most ``gib`` GiB (for hosts with
        less RAM); rows and experts per layer stay the model's."""
        full = cls()
        if gib is None or gib * (1 << 30) >= full.nbytes:
            return full
        per_layer = full.nbytes // full.layers
        return dataclasses.replace(full, layers=max(1, int(gib * (1 << 30)) // per_layer))


class ModelBanks:
    """Host banks of ``fp`` as FreeToken's host_banks allocates them (mmap, fill, then register), plus a
    device reference ``ref[b]`` of shape ``[layers, experts, row]`` per bank and the per-layer
    int64 descriptor ``src_ptrs[layer]`` of source bases."""

    def __init__(self, fp: Footprint, device, *, seed: int = 1, progress: Callable[[str], None] = print):
        import torch
        from freetoken.moe.host_banks import HostBank

        self.fp, self.device = fp, torch.device(device)
        g = torch.Generator(device=self.device).manual_seed(seed)
        self.ref = [torch.empty((fp.layers, fp.experts, r), dtype=torch.uint8, device=self.device) for r in fp.row_bytes]
        self.host: list[list] = []
        t0 = time.perf_counter()
        for layer in range(fp.layers):
            banks = []
            for b, r in enumerate(fp.row_bytes):
                hb = HostBank((fp.experts, r), torch.uint8, backing="mmap")
                self.ref[b][layer].random_(0, 256, generator=g)
                hb.tensor.view(fp.experts, r).copy_(self.ref[b][layer])  # fill, then pin (pin-after-fill)
                hb.pin()
                banks.append(hb)
            self.host.append(banks)
            if (layer + 1) % 10 == 0 or layer + 1 == fp.layers:
                progress(f"banks: {layer + 1}/{fp.layers} layers, {fmt_bytes((layer + 1) * fp.nbytes / fp.layers)} "
                         f"filled and registered in {time.perf_counter() - t0:.0f}s")  # fmt: skip
        self.src_ptrs = [torch.tensor([hb.tensor.data_ptr() for hb in banks], dtype=torch.int64, device=self.device)
                         for banks in self.host]  # fmt: skip

    def close(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)
        for banks in self.host:
            for hb in banks:
                hb.unpin()
        self.host, self.ref = [], []


def poisoned_slots(row_bytes: Sequence[int], device, slots: int = SLOTS) -> SlotCache:
    """A guarded slot cache (gpukit.memory) of ``slots`` rows per bank, every row holding ``POISON``."""
    cache = SlotCache(slots, row_bytes, device)
    cache.poison(POISON)
    return cache


def replays_per_set(n: int) -> int:
    """Replays in one timed set at ``n`` misses per layer: every replay is verified on the host, so large
    ``n`` takes fewer (a 40-layer replay moves 71 MB per miss per layer)."""
    return 24 if n <= 2 else (12 if n <= 8 else 4)


#: A kernel under test: ``launch(slots, src_ptrs, dst_indices, src_indices, num_indices)``.
Launch = Callable[..., None]


class RegimeGraphs:
    """Captured ``layers``-layer graphs of several kernels over one set of banks, slots and miss lists,
    timed per replay in the decode or the replay regime."""

    def __init__(self, banks: ModelBanks, slots: SlotCache, n: int, *, layers: int | None = None, seed: int = 0):
        import torch

        fp = banks.fp
        self.banks, self.slots, self.n = banks, slots, n
        self.layers = min(layers or fp.layers, fp.layers)
        if self.layers * n > slots.slots:
            raise ValueError(f"n={n} x {self.layers} layers needs more than {slots.slots} slots")
        dev = banks.device
        cap = max(n, 1)
        self.dst = torch.zeros((self.layers, cap), dtype=torch.int32, device=dev)
        self.src = torch.zeros((self.layers, cap), dtype=torch.int32, device=dev)
        self.num = torch.full((self.layers, 1), n, dtype=torch.int64, device=dev)
        g = torch.Generator(device="cpu")
        g.manual_seed(seed * 1000 + n)
        self._perm = torch.stack([torch.randperm(fp.experts, generator=g) for _ in range(self.layers)]).to(dev)
        self._gen = g
        self.step = 0  # miss lists handed out so far (the decode regime's position in each permutation)
        self.layer_ids = torch.arange(self.layers, device=dev).repeat_interleave(n)
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.verified = 0
        self.next_list()

    def next_list(self) -> None:
        """Write the next miss list into the captured index tensors (device copies, stream-ordered): new host
        rows, new slots."""
        import torch

        fp, n = self.banks.fp, self.n
        if n == 0:
            return
        cols = (torch.arange(n, device=self._perm.device) + self.step * n) % fp.experts
        self.src[:, :n] = self._perm[:, cols].to(torch.int32)
        new = torch.randperm(self.slots.slots, generator=self._gen)[: self.layers * n]
        self.dst[:, :n] = new.view(self.layers, n).to(device=self.dst.device, dtype=torch.int32)
        self.step += 1

    def capture(self, name: str, launch: Launch) -> None:
        import torch

        def body() -> None:
            for layer in range(self.layers):
                launch(self.slots, self.banks.src_ptrs[layer], self.dst[layer], self.src[layer], self.num[layer])

        body()  # eager warm-up: module load and the kernels' one-time checks stay out of the capture
        torch.cuda.synchronize()
        self.verify(name)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        self.graphs[name] = g

    def verify(self, name: str) -> None:
        """The rows of the current list hold their sources; then poison them again."""
        import torch

        n = self.n
        if n == 0:
            return
        rows = self.src[:, :n].reshape(-1).long()
        dst = self.dst[:, :n].reshape(-1).long()
        for b, (cache, ref) in enumerate(zip(self.slots.dst, self.banks.ref)):
            if not torch.equal(cache[dst], ref[self.layer_ids, rows]):
                raise AssertionError(f"{name}: n={n} bank {b}: a copied slot differs from its source row")
            cache[dst] = POISON
        self.verified += 1

    def check_clean(self, name: str) -> None:
        """After a set: every slot holds the poison again (nothing outside the miss lists was written) and
        the canaries around each bank's slots are intact (:func:`gpukit.memory.check_slot_cache`)."""
        err = check_slot_cache(self.slots, POISON, ())
        if err is not None:
            raise AssertionError(f"{name}: n={self.n}: written outside the miss lists: {err}")

    def time_set(self, name: str, regime: str, reps: int) -> float:
        """Median device µs per LAYER over ``reps`` replays of ``name``'s graph, each timed alone and
        verified; ``regime='decode'`` writes a new miss list before each replay."""
        if regime not in REGIMES:
            raise ValueError(f"regime={regime!r}: expected one of {REGIMES}")
        g = self.graphs[name]
        times = []
        for _ in range(reps):
            if regime == "decode":
                self.next_list()
            times.append(bench(g.replay)[0] * 1e6 / self.layers)  # the list's writes land before the clock
            self.verify(name)
        self.check_clean(name)
        return statistics.median(times)

    def rounds(self, names: Sequence[str], regime: str, rounds: int, reps: int, *, base: str | None = None,
               aa: str | None = None) -> Rounds:  # fmt: skip
        """``rounds`` paired alternating rounds of the named graphs (:func:`suite.rounds.run_rounds`);
        ``.values`` are µs per layer per round."""
        sets = {k: (lambda _r, k=k: self.time_set(k, regime, reps)) for k in names}
        return run_rounds(sets, rounds, base=base, aa=aa)
