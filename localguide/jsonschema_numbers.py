"""JSON numbers as regex ASTs: exact integer and decimal ranges, and ``multipleOf``.

Ranges are built digit by digit (the classic range decomposition), so a bound is
enforced by the automaton itself: no value outside the range can be spelled.
Bounded numbers are written without an exponent; an integer may carry a ``.0``
fraction (JSON Schema counts ``1.0`` as an integer).
"""

from __future__ import annotations

from decimal Decimal, localcontext  # noqa  (replaced below)
