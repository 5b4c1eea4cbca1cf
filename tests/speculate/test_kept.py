"""Decode costs kept from one run to the next (``localguide.speculate.kept``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.runtime import cache
from localguide.speculate import DecodeCost
from localguide.speculate import kept as kept_module
from localguide.speculate.kept import KeptCosts


def timed(lengths: dict[int, float], times: int = 1) -> DecodeCost:
    """A DecodeCost that timed each length ``times`` times at ``lengths[n]`` one-token decodes."""
    c = DecodeCost(explore=0.5)
    c.observe(1, 0.010)
    for _ in range(times):
        for n, r in lengths.items():
            c.observe(n, 0.010 * r)
    return c


def test_a_run_starts_from_what_the_last_one_timed(tmp_path):
    path = tmp_path / "costs"
    assert KeptCosts(path).save_from(timed({3: 2.4, 8: 6.0}, times=3))
    fresh = DecodeCost(explore=0.5)
    assert KeptCosts(path).load_into(fresh)
    assert fresh.relative(3) == pytest.approx(2.4) and fresh.relative(8) == pytest.approx(6.0)
    assert fresh.relative(4) == pytest.approx(2.5)  # (not timed then: the guess)
    assert not fresh.known(3) and not fresh.known(8)  # a guess, not this machine's timing now
    fresh.observe(1, 0.010)
    fresh.observe(8, 0.030)  # timed here: this run's time replaces the guess
    assert fresh.relative(8) == pytest.approx(3.0)
    fresh.forget()  # (drafting resumes after a pause: the machine changed, the kept costs go too)
    assert fresh.relative(3) == pytest.approx(2.0) and fresh.relative(8) == pytest.approx(4.5)


def test_a_cost_kept_long_ago_is_a_guess_within_the_cap_of_a_length_timed_too_few_times(tmp_path, monkeypatch):
    # (kept from a busy moment: dear, but after FRESH seconds not so dear that likely drafts never try it)
    path = tmp_path / "costs"
    assert KeptCosts(path).save_from(timed({2: 40.0, 8: 60.0}, times=3))
    c = DecodeCost(explore=0.5)
    assert KeptCosts(path).load_into(c)
    assert c.relative(2) == pytest.approx(40.0) and c.relative(8) == pytest.approx(60.0)  # (fresh: as it is)
    later = kept_module.time.time() + kept_module.FRESH + 1
    monkeypatch.setattr(kept_module.time, "time", lambda: later)
    c = DecodeCost(explore=0.5)
    assert KeptCosts(path).load_into(c)
    assert c.relative(2) == pytest.approx(1 + c.cap) and c.relative(8) == pytest.approx(1 + 7 * c.cap)


def test_lengths_timed_once_are_kept_and_merged_with_the_earlier_ones(tmp_path, monkeypatch):
    path = tmp_path / "costs"
    first = KeptCosts(path)
    assert first.save_from(timed({3: 2.0}))  # (a one-shot run times few lengths more than once)
    second = KeptCosts(path)
    c = DecodeCost(explore=0.5)
    second.load_into(c)
    c.observe(1, 0.010)
    c.observe(5, 0.050)  # timed once: kept within the cap of a length timed too few times
    assert second.save_from(c)
    got = cache.read(path)
    assert got["lengths"].tolist() == [3, 5] and got["ratios"] == pytest.approx([2.0, 1 + c.cap * 4])
    assert got["when"][0] <= got["when"][1]  # (each length with when it was timed)


def test_writes_only_where_a_length_is_new_or_moved_and_not_too_often(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(kept_module.time, "monotonic", lambda: clock[0])
    k = KeptCosts(tmp_path / "costs")
    assert not k.save_from(DecodeCost())  # nothing timed: nothing to write
    assert k.save_from(timed({2: 3.0}, times=3))
    clock[0] += kept_module.SAVE_EVERY + 1
    assert not k.save_from(timed({2: 3.1}, times=3))  # within CHANGED_BY of what was written
    assert k.save_from(timed({2: 4.0}, times=3))
    clock[0] += 1
    assert not k.save_from(timed({2: 4.0, 6: 5.0}, times=3))  # (a new length, but written a second ago)
    clock[0] += kept_module.SAVE_EVERY
    assert k.save_from(timed({2: 4.0, 6: 5.0}, times=3))


def kept_arrays(lengths, ratios, when=None, fmt=int(kept_module.FORMAT)):
    return {"format": np.array([fmt], np.int32), "lengths": lengths, "ratios": ratios,
            "when": np.full(len(ratios), 1.7e9) if when is None else when}


@pytest.mark.filterwarnings("ignore:localguide. ignoring the damaged decode-cost file")
@pytest.mark.parametrize("arrays", [
    kept_arrays(np.array([2, 3], np.int32), np.array([2.0])),
    kept_arrays(np.array([2], np.int32), np.array([np.nan])),
    kept_arrays(np.array([2], np.int32), np.array([-1.0])),
    kept_arrays(np.array([1], np.int32), np.array([2.0])),
    kept_arrays(np.array([2], np.int32), np.array([2.0]), fmt=9),
    kept_arrays(np.array([2.5]), np.array([2.0])),
    kept_arrays(np.array([2], np.int32), np.array([1e-300])),
    kept_arrays(np.array([2, 2], np.int32), np.array([2.0, 3.0])),
    kept_arrays(np.array([2], np.int32), np.array([2.0]), when=np.array([np.inf])),
    kept_arrays(np.array([2], np.int32), np.array([2.0]), when=np.array([4e9])),  # (timed in the future)
    {"format": np.array([2], np.int32), "lengths": np.array([2], np.int32), "ratios": np.array([2.0])},
])
def test_a_damaged_file_is_timed_afresh_and_written_over(tmp_path, arrays):
    path = tmp_path / "costs"
    cache.save(path, arrays)
    c = DecodeCost(explore=0.5)
    assert not KeptCosts(path).load_into(c)
    assert c.relative(2) == pytest.approx(1.5)  # (the guess)
    assert KeptCosts(path).save_from(timed({2: 3.0}))
    assert KeptCosts(path).load_into(DecodeCost())


def test_a_file_that_is_not_an_arrays_file_is_ignored_with_one_warning(tmp_path):
    path = tmp_path / "costs"
    path.write_bytes(b"not a cache file at all")
    with pytest.warns(RuntimeWarning, match="damaged decode-cost file"):
        assert not KeptCosts(path).load_into(DecodeCost())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not KeptCosts(path).load_into(DecodeCost())  # (once)
    assert not KeptCosts(tmp_path / "absent").load_into(DecodeCost())  # (no file: no warning either)


@pytest.mark.filterwarnings("ignore:localguide. ignoring the damaged decode-cost file")
@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True, width=64)),
                     max_size=20),
       as_float=st.booleans())
def test_any_arrays_load_as_sound_guesses_or_not_at_all(tmp_path_factory, rows, as_float):
    path = tmp_path_factory.mktemp("kept") / "costs"
    lengths = np.array([n for n, _ in rows], np.float64 if as_float else np.int64)
    cache.save(path, kept_arrays(lengths, np.array([r for _, r in rows], np.float64)))
    c = DecodeCost(explore=0.5)
    before = [c.relative(n) for n in range(1, 18)]
    if KeptCosts(path).load_into(c):  # (timed long ago: within the cap)
        assert not as_float
        kept = {n: r for n, r in rows}
        for n in range(1, 18):
            r = c.relative(n)
            assert np.isfinite(r) and kept_module.MIN_RATIO <= r <= 1 + c.cap * (n - 1) + 1e-9 or n == 1
            if n in kept and n > 1:
                assert r == pytest.approx(min(kept[n], 1 + c.cap * (n - 1)))
    else:
        assert [c.relative(n) for n in range(1, 18)] == before
