"""Memory under test: exact-end pinned host banks, guarded slot caches, trap-tailed miss lists, and the
byte-exact reference checks (torch indexing) every timed set and every conformance call goes through (one
allocation model and its poison/verify protocol, together)."""

from __future__ import annotations

import ctypes
import mmap
from typing import Any, Callable, Sequence

from suite.geometry import BankGeom, align_up
from gpukit.runtime import device_pointer, host_register, host_unregister


class PinnedBuffer:
    """One GPU-mapped host allocation of ``nbytes`` whose LAST byte is the last byte of its mapping.

    ``register`` (default): a page-rounded anonymous mmap registered with ``cudaHostRegister(PORTABLE |
    MAPPED)`` (FreeToken's pin-after-fill path), the tensor ending exactly at the end of the registered range,
    then one ``PROT_NONE`` page: a GPU read one byte past the end faults. ``torch`` (where registration fails):
    ``pin_memory=True``, rounded up by the caching allocator (not ``end_exact``); ``host``: the CPU self-test's."""

    def __init__(self, nbytes: int, *, method: str | None = None, guard: bool = True):
        import torch

        self.nbytes = int(nbytes)
        self.method = method or "register"
        self.fallback_reason: str | None = None
        self._registered: int | None = None
        self._mm: mmap.mmap | None = None
        self.end_exact = False
        if self.method == "host":  # CPU self-test only: same layout, no CUDA registration
            self._init_register(guard, register=False)
            return
        if self.method == "register":
            try:
                self._init_register(guard)
                return
            except Exception as e:  # recorded in the conformance summary
                self.fallback_reason = f"register failed: {e!r}"
                self.method = "torch"
        if self.method != "torch":
            raise ValueError(f"method={self.method!r}: expected register, torch (or host on a CPU)")
        self.tensor = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)

    def _init_register(self, guard: bool, register: bool = True) -> None:
        import torch

        page = mmap.PAGESIZE
        span = align_up(max(self.nbytes, 1), page)
        total = span + (page if guard else 0)
        self._mm = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)  # fmt: skip
        full = torch.frombuffer(self._mm, dtype=torch.uint8)
        base = full.data_ptr()
        if guard:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            if libc.mprotect(base + span, page, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
        if register:
            host_register(base, span)
            self._registered = base
            try:
                if device_pointer(base) != base:
                    raise RuntimeError("registered host memory is not GPU-visible at its host address (no UVA identity)")
            except Exception:
                self.close()  # never leave the range registered behind a failed check
                raise
        self.tensor = full[span - self.nbytes : span]
        self.end_exact = True

    def close(self) -> None:
        """Unregister (after a device sync); views of the buffer must not be used by the GPU afterwards.
        The mmap itself is unmapped when its last view dies (views keep it alive), always after this."""
        import torch

        if self._registered is not None:
            torch.cuda.synchronize()
            host_unregister(self._registered)
            self._registered = None
        self.tensor = None

    def __del__(self) -> None:  # never leave a registered range behind an unmapped mmap
        try:
            self.close()
        except Exception:
            pass

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "end_exact": self.end_exact, "fallback_reason": self.fallback_reason}


class HostBanks:
    """``layers`` x ``len(row_bytes)`` host sources ``[experts, row]`` packed in ONE PinnedBuffer, in
    layer-major order, each bank 256-byte aligned, the last layer's last bank ending exactly at the
    end of the allocation; plus a device copy of every source (the reference) and one int64
    ``[num_banks]`` device tensor of source base addresses per layer."""

    def __init__(self, layers: int, experts: int, row_bytes: Sequence[int], device, *, seed: int = 0, align: int = 256,
                 pinned_method: str | None = None):  # fmt: skip
        import torch

        self.layers, self.experts, self.row_bytes = layers, experts, list(row_bytes)
        self.device = torch.device(device)
        offsets: list[list[int]] = []
        pos = 0
        for _ in range(layers):
            offsets.append([])
            for r in self.row_bytes:
                pos = align_up(pos, align)
                offsets[-1].append(pos)
                pos += experts * r
        self.total_bytes = pos
        self.buf = PinnedBuffer(pos, method=pinned_method or ("host" if self.device.type == "cpu" else None))
        flat = self.buf.tensor
        self.host = [[flat[o : o + experts * r].view(experts, r) for o, r in zip(offs, self.row_bytes)]
                     for offs in offsets]  # fmt: skip
        self.dev = [[torch.empty((experts, r), dtype=torch.uint8, device=self.device) for r in self.row_bytes]
                    for _ in range(layers)]  # fmt: skip
        self.src_ptrs = [torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device=self.device)
                         for layer in self.host]  # fmt: skip
        self.fill(seed)

    @property
    def ends_at_allocation_end(self) -> bool:
        last = self.host[-1][-1]
        return self.buf.end_exact and last.data_ptr() + last.numel() == self.buf.tensor.data_ptr() + self.buf.nbytes

    def fill(self, seed: int) -> None:
        """Fresh random bytes: drawn on the device (fast), then copied into the pinned sources."""
        import torch

        g = torch.Generator(device=self.device)
        g.manual_seed(int(seed))
        for dev_layer, host_layer in zip(self.dev, self.host):
            for d, h in zip(dev_layer, host_layer):
                d.random_(0, 256, generator=g)
                h.copy_(d)
        sync(self.device)

    def typed(self, layer: int, banks: Sequence[BankGeom]) -> dict[str, Any]:
        """Layer ``layer``'s host sources as the nvfp4 schema's typed ``[experts, *shape]`` tensors."""
        rows = self.host[layer]
        return {b.name: rows[k].view(b.torch_dtype()).view(self.experts, *b.shape) for k, b in enumerate(banks)}

    @property
    def bytes_per_expert(self) -> int:
        return sum(self.row_bytes)

    def close(self) -> None:
        self.dev = []
        self.host = []
        self.buf.close()


class SlotCache:
    """Per-bank slot caches ``[slots, row]`` uint8, each inside one allocation with a canary region
    before and after; ``dst_ptrs`` is the int64 device descriptor of the slot-cache bases."""

    def __init__(self, slots: int, row_bytes: Sequence[int], device, *, guard: int = 4096, seed: int = 1234):
        import torch

        self.slots, self.row_bytes = slots, list(row_bytes)
        self.device = torch.device(device)
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        self.flat, self.dst, self.guards = [], [], []
        for r in self.row_bytes:
            gb = max(guard, align_up(r, 256))
            flat = torch.empty(gb + slots * r + gb, dtype=torch.uint8, device=self.device)
            flat.random_(0, 256, generator=g)
            self.flat.append(flat)
            self.guards.append(gb)
            self.dst.append(flat[gb : gb + slots * r].view(slots, r))
        self.canary_lo = [f[:gb].clone() for f, gb in zip(self.flat, self.guards)]
        self.canary_hi = [f[-gb:].clone() for f, gb in zip(self.flat, self.guards)]
        self.dst_ptrs = torch.tensor([d.data_ptr() for d in self.dst], dtype=torch.int64, device=self.device)
        self.feat = torch.tensor(self.row_bytes, dtype=torch.int64, device=self.device)

    def poison(self, value: int) -> None:
        for d in self.dst:
            d.fill_(value)

    def guard_error(self) -> str | None:
        import torch

        for b, (f, gb, lo, hi) in enumerate(zip(self.flat, self.guards, self.canary_lo, self.canary_hi)):
            if not torch.equal(f[:gb], lo):
                return f"bank {b}: canary BEFORE the slot cache was overwritten"
            if not torch.equal(f[-gb:], hi):
                return f"bank {b}: canary AFTER the slot cache was overwritten"
        return None

    def snapshot(self) -> list:
        return [f.clone() for f in self.flat]

    def equals_snapshot(self, snap: list) -> bool:
        import torch

        return all(torch.equal(f, s) for f, s in zip(self.flat, snap))

    @property
    def nbytes(self) -> int:
        return self.slots * sum(self.row_bytes)


POISON_CYCLE = (0xA5, 0x5A, 0x00, 0xFF, 0x3C)


def poison_value(i: int, rng=None) -> int:
    """Poison byte of call ``i``: a fixed cycle with a random byte every other call."""
    if rng is not None and i % 2:
        return int(rng.randrange(256))
    return POISON_CYCLE[i % len(POISON_CYCLE)]


def check_slot_cache(cache: SlotCache, poison: int, writes: Sequence[tuple[Any, Any, Sequence[Any]]]) -> str | None:
    """Compare every byte of the slot cache against an independent reference built by torch indexing.

    ``writes`` is a list of ``(slots, rows, sources)`` applied in order (a later write to the same slot
    wins, as a later launch does): ``slots``/``rows`` long tensors (or lists) on the device,
    ``sources[b]`` the device copy of bank ``b``'s source. Everything else must still hold ``poison``;
    the canaries around each bank must be intact. Returns None, or what differs."""
    import torch

    def flat(x: Any) -> Any:
        return torch.as_tensor(x, device=cache.device).long().flatten()

    norm = [(flat(slots), flat(rows), sources) for slots, rows, sources in writes]
    for b, d in enumerate(cache.dst):
        exp = torch.full_like(d, poison)
        for s, r, sources in norm:
            if s.numel():
                exp[s] = sources[b][r]
        if not torch.equal(d, exp):
            diff = (d != exp).any(dim=1).nonzero().flatten()
            rows_bad = diff[:8].tolist()
            written = set(torch.cat([s for s, _, _ in norm]).tolist()) if norm else set()
            kinds = ["written" if x in written else "untouched" for x in rows_bad]
            return (f"bank {b} ({d.shape[1]} B rows): {diff.numel()} slot rows differ from the reference, "
                    f"first {list(zip(rows_bad, kinds))} (poison {poison:#04x})")  # fmt: skip
    return cache.guard_error()


class MissList:
    """Device miss-list buffers of capacity ``capacity`` that are views into twice-larger buffers whose
    tail holds trap entries (slot ``trap_slot``, row ``trap_row``): a kernel that reads past the
    capacity writes the trap slot, which the whole-cache comparison catches."""

    def __init__(self, capacity: int, dtype: str, device, *, trap_slot: int = 0, trap_row: int = 0):
        import torch

        self.capacity = capacity
        self.dtype = getattr(torch, dtype)
        self.device = torch.device(device)
        self._dst_full = torch.full((2 * capacity + 1,), trap_slot, dtype=self.dtype, device=self.device)
        self._src_full = torch.full((2 * capacity + 1,), trap_row, dtype=self.dtype, device=self.device)
        self.dst = self._dst_full[:capacity]
        self.src = self._src_full[:capacity]
        self.num = torch.zeros(1, dtype=torch.int64, device=self.device)

    def set(self, slots: Sequence[int], rows: Sequence[int], n: int) -> None:
        import torch

        assert len(slots) == len(rows) == self.capacity, (len(slots), len(rows), self.capacity)
        self.dst.copy_(torch.tensor(list(slots), dtype=self.dtype))
        self.src.copy_(torch.tensor(list(rows), dtype=self.dtype))
        self.num.fill_(int(n))


def random_misses(
    rng, capacity: int, n: int, slots: int, experts: int, *, forbid_slot: int | None = None
) -> tuple[list[int], list[int]]:
    """``capacity`` distinct slots and as many source rows (rows may repeat), with slot ``slots-1`` /
    slot 0 at positions 0 / n-1 and row ``experts-1`` / row 0 at positions 0 / n-1, so the first
    ``n`` entries always touch the extreme slots and rows (one of each, at random, when n == 1)."""
    pool = [s for s in range(slots) if s != forbid_slot]
    assert capacity <= len(pool), (capacity, len(pool))
    dst = rng.sample(pool, capacity)
    src = [rng.randrange(experts) for _ in range(capacity)]
    if n <= 0:
        return dst, src
    want_slots = [s for s in (slots - 1, 0) if s != forbid_slot]
    want_rows = [experts - 1, 0]
    positions = [0, n - 1] if n >= 2 else [0]
    if n == 1:
        want_slots = [rng.choice(want_slots)] if want_slots else []
        want_rows = [rng.choice(want_rows)]
    for pos, want in zip(positions, want_slots):
        if want in dst:
            j = dst.index(want)
            dst[pos], dst[j] = dst[j], dst[pos]
        else:
            dst[pos] = want
    for pos, want in zip(positions, want_rows):
        src[pos] = want
    return dst, src


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def cache_rows(cache, name: str):
    """An OffloadMoeCache bank's slot cache as ``[slots, row_bytes]`` uint8 (fp8/fp32 reinterpreted)."""
    import torch

    t = cache.bank_caches[name]
    return t.view(torch.uint8).view(t.shape[0], -1)


def cache_reference_diff(
    cache, dev_of_layer: Callable[[int], Sequence[Any]], banks: Sequence[BankGeom], experts: int
) -> str | None:
    """Check a real OffloadMoeCache against its sources: every resident slot holds its (layer, expert)
    row (``dev_of_layer(layer)[k]`` is the device copy of bank k's source), every empty slot is still
    zero, and ``slot_for_id`` / ``id_of_slot`` agree. Returns None or what is wrong."""
    import torch

    ids = cache.id_of_slot.long()
    resident = (ids >= 0).nonzero().flatten()
    layer_of, expert_of = ids[resident] // experts, ids[resident] % experts
    if not torch.equal(cache.slot_for_id.long()[layer_of, expert_of], resident):
        return "slot_for_id and id_of_slot disagree"
    empty = (ids < 0).nonzero().flatten()
    layers = sorted(set(layer_of.tolist()))
    for k, g in enumerate(banks):
        rows = cache_rows(cache, g.name)
        for layer in layers:
            sel = resident[layer_of == layer]
            if not torch.equal(rows[sel], dev_of_layer(layer)[k][ids[sel] % experts]):
                return f"bank {g.name} layer {layer}: a resident slot differs from its source row"
        if empty.numel() and bool(rows[empty].any()):
            return f"bank {g.name}: an empty slot was written"
    return None
