"""The count model: learns, keeps its bound, saves, reloads, and ignores a damaged file."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from localguide import cache
from localguide.speculate import CountModel


def test_learns_the_most_frequent_token():
    c = CountModel()
    assert c.guess(5) is None
    for t in (7, 7, 9, 7):
        c.add(5, t)
    token, p = c.guess(5)
    assert token == 7 and p == pytest.approx(3 / 5)
    assert c.count(5, 9) == 1 and c.count(6, 7) == 0


def test_saves_and_reloads(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    for k in range(20):
        for _ in range(k + 1):
            c.add(k, 100 + k)
        c.add(k, 3)
    c.save()
    d = CountModel(path)
    assert len(d) == 20
    for k in range(20):
        assert d.guess(k) == c.guess(k)
        assert d.count(k, 3) == 1


def test_save_writes_only_changes(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    c.save()
    assert not path.exists()  # nothing learned: nothing written
    c.add(1, 2)
    c.save()
    stamp = path.stat().st_mtime_ns
    c.save()
    assert path.stat().st_mtime_ns == stamp


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30)), max_size=400))
@settings(max_examples=60, deadline=None)
def test_stays_within_its_bound(observations):
    c = CountModel(max_states=10, max_tokens=3)
    for k, t in observations:
        c.add(k, t)
    assert len(c) <= 10
    arrays = c.to_arrays()
    for k in set(arrays["keys"].tolist()):
        assert (arrays["keys"] == k).sum() <= 3
    # The guess is a token of its state with the largest count.
    for k in set(arrays["keys"].tolist()):
        rows = arrays["keys"] == k
        token, _ = c.guess(k)
        assert c.count(k, token) == arrays["counts"][rows].max()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong arrays", "negative counts"])
def test_a_damaged_file_is_ignored_with_one_warning(tmp_path, damage):
    path = tmp_path / "counts.lgarrays"
    good = CountModel(path)
    good.add(1, 2)
    good.save()
    if damage == "garbage":
        path.write_bytes(b"not a counts file at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "wrong arrays":
        cache.save(path, {"something": np.arange(3)})
    else:
        a = good.to_arrays()
        a["counts"][:] = -1
        cache.save(path, a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = CountModel(path)
        CountModel(path)  # a second load of the same file says nothing more
    assert len(c) == 0 and c.guess(1) is None
    assert len(caught) == 1 and "damaged draft counts" in str(caught[0].message)
    c.add(1, 4)  # and it learns, and replaces the file
    c.save()
    assert CountModel(path).guess(1)[0] == 4


def test_shared_between_threads():
    c = CountModel(max_states=64)

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(2000):
            c.add(int(rng.integers(0, 100)), int(rng.integers(0, 5)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a = c.to_arrays()
    assert len(c) <= 64
    assert a["counts"].sum() <= 8000


def test_the_calibration_is_saved_with_the_counts(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    c.add(1, 2)
    c.calibration.forced_rate, c.calibration.hits, c.calibration.predicted = 0.5, 0.25, 0.75
    c.save()
    d = CountModel(path).calibration
    assert (d.forced_rate, d.hits, d.predicted) == (0.5, 0.25, 0.75)


def test_drafting_pauses_where_it_does_not_pay_and_resumes_where_it_does():
    from localguide.speculate.counts import JUDGED, MAX_PAUSE, MIN_PAUSE, PROBE

    cal = CountModel().calibration

    def decodes(n: int, tokens: int, cost: float) -> list[bool]:
        """Whether each of ``n`` decodes drafted; those that did gave ``tokens`` for ``cost``."""
        out = []
        for _ in range(n):
            out.append(cal.drafting())
            if out[-1]:
                cal.settle(tokens, cost)
        return out

    first = decodes(JUDGED + MIN_PAUSE + PROBE, 1, 3.0)  # 1 token for the time of 3
    assert first == [True] * JUDGED + [False] * MIN_PAUSE + [True] * PROBE
    second = decodes(2 * MIN_PAUSE + PROBE, 1, 3.0)  # losing still: the next pause is twice as long
    assert second == [False] * 2 * MIN_PAUSE + [True] * PROBE
    decodes(5000, 1, 3.0)
    assert cal.pause == MAX_PAUSE  # the pauses have a ceiling
    long_run = decodes(10 * MAX_PAUSE, 1, 3.0)  # and drafting costs little where it never pays
    assert sum(long_run) <= 10 * PROBE + PROBE
    while not cal.drafting():
        pass
    assert all(decodes(50, 4, 2.0))  # drafts that pay again: no more pauses, and the next is short
    assert cal.pause == MIN_PAUSE
    assert all(decodes(JUDGED, 4, 2.0) + decodes(1, 1, 4.0) + decodes(3, 4, 2.0))  # a loss among gains
