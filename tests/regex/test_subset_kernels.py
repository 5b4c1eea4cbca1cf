"""The subset construction kernel against its plain-Python twin."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from strategies import small_schemas

from localguide.runtime.numba_tools import kernels_only
from localguide.regex import subset_kernels
from kernel_strategies import assert_same_dfa

# --- subset construction of JSON Schema automata ---------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_schemas())
def test_subset_dfa_equals_twin(schema):
    """The compiled subset construction and its twin give the same minimal automaton."""
    from localguide.regex import ast_dfa as jsonschema_dfa
    from localguide.json_schema.schema import schema_to_ast

    node = schema_to_ast(schema, any_depth=1, max_length=8, max_items=3).node
    with kernels_only():  # (else a small automaton may take the twin on both sides)
        got = jsonschema_dfa.ast_to_dfa(node)
    jsonschema_dfa.subset_dfa = subset_kernels.py_subset_dfa
    try:
        want = jsonschema_dfa.ast_to_dfa(node)
    finally:
        jsonschema_dfa.subset_dfa = subset_kernels.subset_dfa
    assert_same_dfa((got.transitions, got.accepting), (want.transitions, want.accepting))
