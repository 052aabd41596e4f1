"""A pure-Python model of decode_gather's TMA ring for one CTA, mirroring decode_gather.cuh's
``FREETOKEN_DECODE_GATHER_TMA`` branch: the prologue, mbarrier waits and parities, ``wait_group.read 1``
refills and the final ``wait_group 0``, with the rules of the hardware it relies on checked as it runs.
Its chunks come from :mod:`conformance.chunk_plan`, whose anchors list the statements mirrored here."""

from __future__ import annotations

from typing import Sequence

from conformance.chunk_plan import Chunk, ModelError

class RingError(AssertionError):
    """The ring broke a rule of the hardware it runs on (a data race, a hang, a lost chunk)."""


class RingModel:
    """The ``FREETOKEN_DECODE_GATHER_TMA`` branch for one CTA, with the hardware's rules checked.

    Kernel state mirrored: ``pending_dst``/``pending_bytes`` (here one slot holding the chunk),
    ``load_stage``, the loop's ``stage``/``phase``. Hardware state modelled pessimistically: a
    bulk load's bytes are only known to have landed once the thread waited for its mbarrier
    phase; a bulk store only stops reading its stage at a ``wait_group.read`` that covers it, and
    only completes at a ``wait_group`` that covers it.
    """

    def __init__(self, stages: int, chunks: Sequence[Chunk]) -> None:
        if stages < 2:
            raise ModelError("static_assert(kStages >= 2)")
        self.stages = stages
        self._source = list(chunks)
        self._taken = 0
        # kernel state
        self.pending: list[Chunk | None] = [None] * stages  # pending_dst[s] / pending_bytes[s]
        self.load_stage = 0
        # hardware state
        self.initialised = [False] * stages
        self.fenced = [False] * stages  # per barrier: initialised before a fence.proxy.async
        self.armed = [0] * stages  # phases armed (arrive.expect_tx + bulk load) per barrier
        self.waited = [0] * stages  # phases the thread has waited for
        self.holds: list[Chunk | None] = [None] * stages  # whose bytes the stage holds / receives
        self.landed = [False] * stages
        self.groups: list[tuple[int, Chunk]] = []  # committed bulk-store groups: (stage, chunk)
        self.read_done = 0  # groups[:read_done] have finished reading their stage
        self.write_done = 0  # groups[:write_done] have landed in global memory
        self.stored: set[int] = set()  # ids of chunks whose store was issued
        self.written: list[Chunk] = []

    # --- device operations -------------------------------------------------------------------

    def mbar_init(self, s: int) -> None:
        self.initialised[s] = True

    def fence_proxy_async(self) -> None:
        self.fenced = list(self.initialised)  # what the fence makes visible: the inits before it

    def cursor_next(self) -> Chunk:
        if self._taken >= len(self._source):
            raise RingError(f"the ring takes chunk #{self._taken} but the CTA has {len(self._source)}")
        c = self._source[self._taken]
        self._taken += 1
        return c

    def issue(self) -> None:
        """The kernel's ``issue`` lambda."""
        c = self.cursor_next()
        s = self.load_stage
        old = self.pending[s]
        if old is not None and id(old) not in self.stored:
            raise RingError(f"stage {s}: pending dst/bytes of {old} overwritten before its store was issued")
        self.pending[s] = c
        self.bulk_load(s, c)
        self.load_stage = 0 if self.load_stage + 1 == self.stages else self.load_stage + 1

    def bulk_load(self, s: int, c: Chunk) -> None:
        if not self.initialised[s] or not self.fenced[s]:
            raise RingError(f"stage {s}: bulk load before mbarrier.init and fence.proxy.async")
        for g in range(self.read_done, len(self.groups)):
            stage, chunk = self.groups[g]
            if stage == s:
                raise RingError(f"stage {s}: loading {c} while the store of {chunk} may still read the stage")
        old = self.holds[s]
        if old is not None and id(old) not in self.stored:
            raise RingError(f"stage {s}: loading {c} over the bytes of {old} before they were stored")
        if self.armed[s] != self.waited[s]:
            raise RingError(f"stage {s}: barrier armed twice without a wait (phase parity aliases)")
        self.armed[s] += 1
        self.holds[s] = c
        self.landed[s] = False

    def mbar_wait(self, s: int, parity: int) -> None:
        if self.armed[s] == self.waited[s]:
            raise RingError(f"stage {s}: waiting on a barrier with no load in flight (hangs)")
        want = self.waited[s] & 1
        if parity != want:
            raise RingError(
                f"stage {s}: waits parity {parity} for phase #{self.waited[s]} (parity {want}): try_wait.parity "
                "returns at once on the previous phase, before the bytes land"
            )
        self.waited[s] += 1
        self.landed[s] = True

    def bulk_store(self, c: Chunk | None, s: int) -> None:
        """``bulk_store(pending_dst[s], ring + s * kChunkBytes, pending_bytes[s])`` + commit."""
        if c is None:
            raise RingError(f"stage {s}: store with no pending dst")
        if not self.landed[s]:
            raise RingError(f"stage {s}: store of {c} before its load was waited for")
        if self.holds[s] is not c:
            raise RingError(f"stage {s}: stores {c}'s dst with the bytes of {self.holds[s]}")
        if id(c) in self.stored:
            raise RingError(f"{c} stored twice")
        self.stored.add(id(c))
        self.groups.append((s, c))

    def wait_group_read(self, allowed: int) -> None:
        """``cp.async.bulk.wait_group.read N``: all but the N newest groups done reading."""
        self.read_done = max(self.read_done, len(self.groups) - allowed)

    def wait_group(self, allowed: int) -> None:
        """``cp.async.bulk.wait_group N``: all but the N newest groups complete."""
        done = max(self.write_done, len(self.groups) - allowed)
        self.written.extend(c for _, c in self.groups[self.write_done:done])
        self.write_done = done
        self.read_done = max(self.read_done, done)

    def exit(self) -> None:
        if self.write_done != len(self.groups):
            raise RingError(f"the CTA exits with {len(self.groups) - self.write_done} bulk stores in flight")
        if self._taken != len(self._source):
            raise RingError(f"the ring took {self._taken} of the CTA's {len(self._source)} chunks")

    # --- the kernel's loop -------------------------------------------------------------------

    def run(self, my_chunks: int, early: bool = False) -> list[Chunk]:
        """``early``: the CTA's first chunk lies in row 0, and lane 0 issues it into stage 0 before the other
        barriers are initialised (the kernel's ``const bool early``)."""
        stages = self.stages
        issued = 0
        if early and my_chunks:
            self.mbar_init(0)
            self.fence_proxy_async()
            self.issue()
            issued = 1
        for s in range(stages):
            if not (early and s == 0):
                self.mbar_init(s)
        self.fence_proxy_async()
        prologue = my_chunks if my_chunks < stages else stages
        for _ in range(issued, prologue):
            self.issue()
        stage = 0
        phase = 0
        for i in range(my_chunks):
            self.mbar_wait(stage, phase)
            self.bulk_store(self.pending[stage], stage)
            if i >= 1 and i - 1 + stages < my_chunks:
                self.wait_group_read(1)
                self.issue()
            stage += 1
            if stage == stages:
                stage = 0
                phase ^= 1
        self.wait_group(0)
        self.exit()
        return self.written


def simulate_ring(chunks: Sequence[Chunk], stages: int, *, model_cls: type[RingModel] = RingModel) -> list[Chunk]:
    """Run one CTA's chunks through the ring; the chunks in the order their stores completed."""
    return model_cls(stages, chunks).run(len(chunks), early=bool(chunks) and chunks[0].row == 0)
