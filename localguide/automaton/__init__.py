"""Byte-level finite automata: ``ByteDFA``, ``ByteNFA``, minimization and UTF-8 byte ranges."""

from .dfa import ByteDFA, ByteNFA, combine, minimize, product, product_walk, row_runs

__all__ = ["ByteDFA", "ByteNFA", "combine", "minimize", "product", "product_walk", "row_runs"]
