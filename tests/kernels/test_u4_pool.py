"""The C engines' worker pool (w4a8_sched.h, shared by the u4, u8s8 and AMX engines): every
thread count, concurrent callers and a growing pool give the single-thread result bit for
bit (each output column is computed by one thread, in one order)."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from w4a8_kernels import _native_lib
from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native
from w4a8_kernels.int8_gemm import C_ENGINES

ENGINES = [e for e in C_ENGINES if not _native_lib.why_unavailable(e)]


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.skipif(not ENGINES, reason="no C engine builds on this CPU")
@pytest.mark.parametrize("engine", ENGINES)
def test_pool_matches_one_thread(engine, restore_threads):
    gen = torch.Generator().manual_seed(16)
    n, k = 1000, 384  # a ragged last tile, three groups of 128
    w = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    prepared = prepare_w4a8(w, torch.rand(n, 3, generator=gen) + 0.5, 128, engine=engine)
    xs = [torch.randn(m, k, generator=gen) for m in (1, 3, 7, 40)]  # 40: two AMX token blocks
    torch.set_num_threads(1)
    want = [w4a8_native(x, prepared) for x in xs]
    for threads in (2, 5, 3, 2):  # the pool grows to 4 workers, then runs fewer
        torch.set_num_threads(threads)
        for x, ref in zip(xs, want):
            assert torch.equal(w4a8_native(x, prepared), ref), (threads, x.shape)
    # callers in parallel: one holds the pool, the others start their own threads
    torch.set_num_threads(2)
    with ThreadPoolExecutor(3) as ex:
        got = list(ex.map(lambda i: w4a8_native(xs[i % 4], prepared), range(30)))
    for i, out in enumerate(got):
        assert torch.equal(out, want[i % 4]), i
