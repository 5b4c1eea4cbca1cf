"""The count model: learns, keeps its bound, saves, reloads, and ignores a damaged file."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from localguide.runtime import cache
from localguide.speculate import CountModel
from localguide.speculate.counts import LOOKUPS, MAX_CONTEXT_TOKENS, ORDER, RECENT, Calibration


def test_learns_the_most_frequent_token():
    c = CountModel()
    assert c.guess(5) is None
    for t in (7, 7, 9, 7):
        c.add(5, t)
    token, p, order = c.guess(5)
    assert token == 7 and p == pytest.approx((3 / 4) ** 2) and order == 0  # (not alone in its row)
    c.add(6, 8)
    assert c.guess(6).p == pytest.approx(0.5)  # alone, seen once
    c.add(6, 8)
    assert c.guess(6).p == pytest.approx(1 - 1 / 8)  # alone, seen twice
    assert c.count(5, 9) == 1 and c.count(6, 7) == 0


def test_guesses_from_the_longest_context_seen():
    c = CountModel()
    # state 5: after token 1 the model took 10, after 2 it took 20 (twice), after (3, 1) it took 30
    for context, t in [((1,), 10), ((2,), 20), ((2,), 20), ((3, 1), 30)]:
        c.add(5, t, context)
    assert c.guess(5) == (20, pytest.approx((2 / 4) ** 2), 0)  # the state alone
    assert c.guess(5, (1,)) == (10, pytest.approx((1 / 2) ** 2), 1)  # (10 once, 30 once: the first kept)
    assert c.guess(5, (9, 2)) == (20, pytest.approx(1 - 1 / 8), 1)  # (9, 2) unseen: backs off to (2,)
    assert c.guess(5, (3, 1)) == (30, pytest.approx(1 / 2), 2)
    assert c.guess(5, (7, 7, 3, 1)) == (30, pytest.approx(1 / 2), 2)  # only the last ORDER count
    assert c.guess(6, (1,)) is None  # the context is of another state
    assert c.count(5, 20, (2,)) == 2 and c.count(5, 30, (3, 1)) == 1 and c.count(5, 30, (1,)) == 1


def test_saves_and_reloads(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    for k in range(20):
        for _ in range(k + 1):
            c.add(k, 100 + k)
        c.add(k, 3)
        c.add(k, 7, (k, 1, 2, 3))
    c.save()
    d = CountModel(path)
    assert len(d) == 20 and d.contexts == c.contexts == 20 * ORDER
    for k in range(20):
        assert d.guess(k) == c.guess(k)
        assert d.count(k, 3) == 1
        for ctx in [(3,), (2, 3), (1, 2, 3), (5, 3)]:
            assert d.guess(k, ctx) == c.guess(k, ctx)
        assert d.guess(k, (1, 2, 3)) == (7, 0.5, 3)


def test_a_full_count_model_keeps_learning_new_contexts():
    c = CountModel(max_contexts=8)
    for _ in range(5):
        c.add(1, 10, (2,))  # seen often
    for t in range(100, 120):  # then many contexts seen once
        c.add(1, 11, (t,))
    assert c.contexts <= 8
    assert c.guess(1, (2,)) == (10, pytest.approx(1 - 1 / 50), 1)  # the frequent one stays
    assert c.guess(1, (119,)).order == 1  # and the newest is learned
    assert c.guess(1, (100,)).order == 0  # an old one seen once made room
    assert CountModel(max_contexts=0).contexts == 0
    none = CountModel(max_contexts=0)
    none.add(1, 2, (3, 4))
    assert none.contexts == 0 and none.guess(1, (3, 4)) == (2, 0.5, 0)


def test_a_file_from_before_the_contexts_loads(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    c.add(1, 2, (4, 5))
    c.calibration.hits[0], c.calibration.predicted[0] = 0.25, 0.5
    c.save()
    a = c.to_arrays()
    for name in ("context_keys", "context_tokens", "context_counts"):
        del a[name]
    a["calibration"] = np.array([0.5, 0.25, 0.5])
    cache.save(path, a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = CountModel(path)
    assert d.guess(1) == c.guess(1) and d.contexts == 0 and d.guess(1, (4, 5)).order == 0
    assert d.calibration.hits == [0.25] + [1.0] * RECENT and d.calibration.predicted == [0.5] + [1.0] * RECENT


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
    c = CountModel(max_states=10, max_tokens=3, max_contexts=12)
    for i, (k, t) in enumerate(observations):
        c.add(k, t, tuple(t for _, t in observations[max(0, i - 4):i]))
    assert len(c) <= 10 and c.contexts <= 12
    arrays = c.to_arrays()
    rows = [tuple(r) for r in arrays["context_keys"].tolist()]
    assert all(rows.count(r) <= MAX_CONTEXT_TOKENS for r in rows)
    assert len(set(rows)) == c.contexts
    for k in set(arrays["keys"].tolist()):
        assert (arrays["keys"] == k).sum() <= 3
    # The guess is a token of its state with the largest count.
    for k in set(arrays["keys"].tolist()):
        rows = arrays["keys"] == k
        assert c.count(k, c.guess(k).token) == arrays["counts"][rows].max()


@pytest.mark.parametrize("damage", ["padding inside", "no tokens before", "wrong width", "negative counts"])
def test_damaged_context_rows_are_ignored_with_one_warning(tmp_path, damage):
    path = tmp_path / "counts.lgarrays"
    good = CountModel(path)
    good.add(1, 2, (3, 4))
    a = good.to_arrays()
    keys = a["context_keys"]
    if damage == "padding inside":
        keys[0] = [-1, 3, -1, 4]
    elif damage == "no tokens before":
        keys[0] = [-1, -1, -1, 1]
    elif damage == "wrong width":
        a["context_keys"] = keys[:, 1:].copy()
    else:
        a["context_counts"][:] = -1
    cache.save(path, a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = CountModel(path)
        CountModel(path)
    assert len(caught) == 1 and "damaged draft counts" in str(caught[0].message)
    assert c.guess(1) == good.guess(1) and c.contexts == 0  # the state counts are kept


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
    c.calibration.forced_rate = 0.5
    hits = [0.25 * (i + 1) for i in range(RECENT + 1)]
    predicted = [1.0 / (i + 1) for i in range(RECENT + 1)]
    c.calibration.hits[:], c.calibration.predicted[:] = hits, predicted
    lookup = [0.1 * (i + 1) for i in range(LOOKUPS)]
    c.calibration.lookup[:] = lookup
    c.save()
    d = CountModel(path).calibration
    assert (d.forced_rate, d.hits, d.predicted, d.lookup) == (0.5, hits, predicted, lookup)


def test_a_calibration_from_before_the_lookup_rates_loads(tmp_path):
    path = tmp_path / "counts.lgarrays"
    c = CountModel(path)
    c.add(1, 2)
    c.calibration.forced_rate = 0.5
    arrays = c.to_arrays()
    arrays["calibration"] = arrays["calibration"][:1 + 2 * (RECENT + 1)]
    cache.save(path, arrays)
    d = CountModel(path).calibration
    assert d.forced_rate == 0.5 and d.lookup == Calibration().lookup


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

    first = decodes(JUDGED + MIN_PAUSE + PROBE, 1, 2.0)  # 1 token for the time of 2
    assert first == [True] * JUDGED + [False] * MIN_PAUSE + [True] * PROBE
    assert cal.probing  # (the decodes after a pause probe: short drafts, ``PROBE_DRAFTS``)
    second = decodes(2 * MIN_PAUSE + PROBE, 1, 2.0)  # losing still: the next pause is twice as long
    assert second == [False] * 2 * MIN_PAUSE + [True] * PROBE
    decodes(5000, 1, 2.0)
    assert cal.pause == MAX_PAUSE  # the pauses have a ceiling
    long_run = decodes(10 * MAX_PAUSE, 1, 2.0)  # and drafting costs little where it never pays
    assert sum(long_run) <= 10 * PROBE + PROBE
    while not cal.drafting():
        pass
    assert all(decodes(50, 4, 2.0))  # drafts that pay again: no more pauses, and the next is short
    assert cal.pause == MIN_PAUSE and not cal.probing
    assert all(decodes(JUDGED, 4, 2.0) + decodes(1, 1, 4.0) + decodes(3, 4, 2.0))  # a loss among gains


def test_drafting_that_loses_several_decodes_each_pauses_within_a_few():
    """A busy machine: each decode with drafts costs many one-token decodes. Judged after
    ``EARLY`` of them, not ``JUDGED``; a small loss still waits for ``JUDGED``."""
    from localguide.speculate.counts import EARLY, JUDGED, MIN_PAUSE

    cal = CountModel().calibration
    drafted = []
    for _ in range(EARLY + MIN_PAUSE):
        drafted.append(cal.drafting())
        if drafted[-1]:
            cal.settle(1, 12.0)
    assert drafted == [True] * EARLY + [False] * MIN_PAUSE
    cal = CountModel().calibration
    for _ in range(JUDGED - 1):
        assert cal.drafting()
        cal.settle(1, 1.5)
    assert cal.drafting()


def test_proposing_slows_where_proposals_come_to_nothing_and_resumes_at_one_that_pays():
    from localguide.speculate.counts import IDLE, IDLE_EVERY

    cal = CountModel().calibration
    asked = []
    for decode in range(IDLE + 8 * IDLE_EVERY):
        asked.append(cal.proposing(False, decode))
        if asked[-1]:
            cal.chose(0)  # nothing worth its decode
    assert asked[:IDLE] == [True] * IDLE
    assert [d for d in range(IDLE, len(asked)) if asked[d]] == list(range(IDLE, len(asked), IDLE_EVERY))
    assert cal.proposing(True, 1)  # a state whose forced text is known: always proposed
    # counted per generation: two generations sharing the calibration each propose every 4th
    assert [cal.proposing(False, d) for d in range(8)] == [cal.proposing(False, d) for d in range(8)]
    cal.chose(3)  # drafts worth their decode: proposing on every decode again
    assert all(cal.proposing(False, d) for d in range(1, IDLE))
