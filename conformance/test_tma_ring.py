"""Tests of the TMA ring model (tma_ring.py): any stages store each chunk exactly once, in order, with
no stage reused before its store has read it, no wait on a wrong mbarrier phase, nothing in flight at
exit; and broken rings (refill, phase, wait bugs) are caught by the same checks. The ring over real
plans: test_chunk_plan.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import chunk_plan as cp
from conformance import tma_ring as ring


@settings(max_examples=100, deadline=None)
@given(my_chunks=st.integers(0, 300), stages=st.integers(2, 8))
def test_ring_stores_every_chunk_once_without_races(my_chunks, stages):
    chunks = [cp.Chunk(0, k, k, 0, 0, 0, 16) for k in range(my_chunks)]
    assert ring.simulate_ring(chunks, stages) == chunks


class RefillBeforeItsStoreRead(ring.RingModel):
    """wait_group.read 2: the store of chunk i-1 may still read the stage being refilled."""

    def wait_group_read(self, allowed):
        super().wait_group_read(allowed + 1)


class PhaseNeverFlips(ring.RingModel):
    def mbar_wait(self, s, parity):
        super().mbar_wait(s, 0)


class RefillsTheJustStoredStage(ring.RingModel):
    def run(self, my_chunks, early=False):
        stages = self.stages
        for s in range(stages):
            self.mbar_init(s)
        self.fence_proxy_async()
        for _ in range(min(my_chunks, stages)):
            self.issue()
        stage = phase = 0
        for i in range(my_chunks):
            self.mbar_wait(stage, phase)
            self.bulk_store(self.pending[stage], stage)
            if i + stages < my_chunks:  # chunk i+S into chunk i's stage, whose store may still read it
                self.wait_group_read(1)
                self.issue()
            stage += 1
            if stage == stages:
                stage, phase = 0, phase ^ 1
        self.wait_group(0)
        self.exit()
        return self.written


class EarlyLoadBeforeItsFence(ring.RingModel):
    """Lane 0 issues its early chunk before the fence that makes stage 0's barrier visible to the bulk-copy proxy."""

    def run(self, my_chunks, early=False):
        self.mbar_init(0)
        self.issue()
        return super().run(my_chunks)


class NoFinalWait(ring.RingModel):
    def wait_group(self, allowed):
        pass  # the CTA retires with stores in flight


@pytest.mark.parametrize(
    "model_cls", [RefillBeforeItsStoreRead, PhaseNeverFlips, RefillsTheJustStoredStage, EarlyLoadBeforeItsFence,
                  NoFinalWait],
    ids=lambda c: c.__name__,
)
@pytest.mark.parametrize("stages", [2, 4, 8])
def test_broken_ring_is_caught(model_cls, stages):
    chunks = [cp.Chunk(0, k, k, 0, 0, 0, 16) for k in range(3 * stages + 1)]
    with pytest.raises(ring.RingError):
        ring.simulate_ring(chunks, stages, model_cls=model_cls)
