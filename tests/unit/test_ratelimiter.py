"""Ports of client-go util/workqueue default_rate_limiters_test.go."""

from __future__ import annotations

import pytest

from controller.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)

MS = 0.001


def test_item_exponential_failure_rate_limiter():
    lim = ItemExponentialFailureRateLimiter(1 * MS, 1.0)
    for want in (1, 2, 4, 8, 16):
        assert lim.when("one") == pytest.approx(want * MS)
    assert lim.num_requeues("one") == 5
    assert lim.when("two") == pytest.approx(1 * MS)
    assert lim.when("two") == pytest.approx(2 * MS)
    assert lim.num_requeues("two") == 2
    lim.forget("one")
    assert lim.num_requeues("one") == 0
    assert lim.when("one") == pytest.approx(1 * MS)


def test_item_exponential_failure_rate_limiter_caps_at_max():
    lim = ItemExponentialFailureRateLimiter(1 * MS, 1.0)
    delays = [lim.when("one") for _ in range(20)]
    assert delays[10] == 1.0 and delays[-1] == 1.0
    assert delays == sorted(delays)


def test_item_exponential_failure_rate_limiter_overflow():
    # client-go: 2^n overflows int64 nanoseconds; here floats overflow past 2^1024
    lim = ItemExponentialFailureRateLimiter(1e-9, 1000.0)
    for _ in range(5):
        lim.when("one")
    assert lim.when("one") == pytest.approx(32e-9)
    for _ in range(2000):
        d = lim.when("overflow1")
        assert 0 < d <= 1000.0
    assert lim.when("overflow1") == 1000.0
    lim = ItemExponentialFailureRateLimiter(1e-9, 1000.0)
    for _ in range(1050):
        lim.when("overflow2")
    assert lim.when("overflow2") == 1000.0


@pytest.mark.parametrize(
    ("fast", "slow", "max_fast", "item_one", "item_two"),
    [
        (5 * MS, 10.0, 3, [5 * MS, 5 * MS, 5 * MS, 10.0, 10.0], [5 * MS, 5 * MS]),
        (1 * MS, 2.0, 1, [1 * MS, 2.0, 2.0, 2.0, 2.0], [1 * MS, 2.0]),
    ],
)
def test_item_fast_slow_rate_limiter(fast, slow, max_fast, item_one, item_two):
    lim = ItemFastSlowRateLimiter(fast, slow, max_fast)
    assert [lim.when("one") for _ in item_one] == pytest.approx(item_one)
    assert lim.num_requeues("one") == len(item_one)
    assert [lim.when("two") for _ in item_two] == pytest.approx(item_two)
    assert lim.num_requeues("two") == len(item_two)
    lim.forget("one")
    assert lim.num_requeues("one") == 0
    assert lim.when("one") == pytest.approx(fast)


def test_max_of_rate_limiter():
    lim = MaxOfRateLimiter(ItemFastSlowRateLimiter(5 * MS, 3.0, 3), ItemExponentialFailureRateLimiter(1 * MS, 1.0))
    assert [lim.when("one") for _ in range(5)] == pytest.approx([5 * MS, 5 * MS, 5 * MS, 3.0, 3.0])
    assert lim.num_requeues("one") == 5
    assert [lim.when("two") for _ in range(2)] == pytest.approx([5 * MS, 5 * MS])
    assert lim.num_requeues("two") == 2
    lim.forget("one")
    assert lim.num_requeues("one") == 0
    assert lim.when("one") == pytest.approx(5 * MS)


def test_max_of_needs_a_limiter():
    with pytest.raises(ValueError):
        MaxOfRateLimiter()


def test_bucket_rate_limiter_burst_then_rate():
    lim = BucketRateLimiter(qps=10, burst=3)
    assert [lim.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    # each further reservation waits one more token's worth (0.1 s) than the one before
    d4, d5, d6 = lim.when(3), lim.when(4), lim.when(5)
    assert 0 < d4 <= 0.1
    assert d5 == pytest.approx(d4 + 0.1, abs=0.03)
    assert d6 == pytest.approx(d5 + 0.1, abs=0.03)
    assert lim.num_requeues(3) == 0
    lim.forget(3)  # no-op


def test_bucket_rate_limiter_disabled_with_zero_qps():
    lim = BucketRateLimiter(qps=0, burst=1)
    assert all(lim.when(i) == 0.0 for i in range(100))


def test_default_controller_rate_limiter():
    lim = default_controller_rate_limiter()
    assert lim.when("a") == pytest.approx(0.005)
    assert lim.when("a") == pytest.approx(0.010)
    assert lim.num_requeues("a") == 2
    # the overall bucket: burst 100, so the first hundred distinct items are not delayed by it
    assert max(lim.when(i) for i in range(98)) == pytest.approx(0.005)
    lim.forget("a")
    assert lim.num_requeues("a") == 0
    # 1000 s cap per item
    for _ in range(40):
        d = lim.when("b")
    assert d == 1000.0


def test_default_controller_rate_limiter_bucket_kicks_in():
    lim = default_controller_rate_limiter(qps=10, burst=2)
    lim.when("x1")
    lim.when("x2")
    assert lim.when("x3") > 0.05  # the overall bucket, not the per-item 5 ms
