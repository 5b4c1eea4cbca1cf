"""The DFA minimization kernel against its plain-Python twin."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from localguide.automaton import minimize_kernels
from kernel_strategies import SETTINGS, random_dfas, assert_same_dfa

@SETTINGS
@given(random_dfas(max_states=12), st.data())
def test_minimize_dfa_equals_twin(trans, data):
    """Hopcroft-style refinement (compiled) and Moore's refinement (the twin) give the same
    array: the minimal DFA, numbered canonically; unreachable and dead-end states go."""
    acc = np.array(data.draw(st.lists(st.booleans(), min_size=len(trans), max_size=len(trans))), bool)
    assert_same_dfa(minimize_kernels.minimize_dfa(trans, acc), minimize_kernels.py_minimize_dfa(trans, acc))


def test_minimize_dfa_edge_cases():
    none = np.full((1, 256), -1, np.int32)
    for trans, acc in [
        (none, np.zeros(1, bool)),  # empty language
        (none, np.ones(1, bool)),  # only the empty string
        (np.full((3, 256), 1, np.int32), np.array([False, False, False])),  # no accepting state
        (np.full((3, 256), 2, np.int32), np.array([False, True, True])),  # 1 and 2 unreachable / equal
    ]:
        assert_same_dfa(minimize_kernels.minimize_dfa(trans, acc), minimize_kernels.py_minimize_dfa(trans, acc))
    # A chain of 3,000 states that all differ (Moore needs a round per state; not Hopcroft).
    n = 3000
    chain = np.full((n, 256), -1, np.int32)
    chain[np.arange(n - 1), 97] = np.arange(1, n)
    chain[np.arange(n - 1), 98] = n - 1
    acc = np.zeros(n, bool)
    acc[-1] = True
    got = minimize_kernels.minimize_dfa(chain, acc)
    assert got[0].shape == (n, 256)
    assert_same_dfa(got, minimize_kernels.py_minimize_dfa(chain, acc))
    # ...and a cycle of 3,000 accepting states that are all the same: one state.
    loop = np.full((n, 256), -1, np.int32)
    loop[:, 97] = (np.arange(n) + 1) % n
    loop[:, 98] = n - 1
    got = minimize_kernels.minimize_dfa(loop, np.ones(n, bool))
    assert_same_dfa(got, minimize_kernels.py_minimize_dfa(loop, np.ones(n, bool)))
    assert got[0].shape[0] == 1 and got[0][0, 97] == got[0][0, 98] == 0
