"""A JSON Schema's language as a context-free grammar, for automata too large to build.

A schema AST (``jsonschema_ast``) is regular, but its minimal DFA can be huge where a
grammar is small: properties that are all optional and kept in order need, after each
one, a state per prefix of every key that may still come (quadratic in their number),
and a shared definition needs a copy per place it is used. ``ast_to_cfg`` keeps the AST's
sharing instead: small sub-expressions (a key, a string, a number) become terminals
(byte DFAs), the rest becomes rules, one nonterminal per distinct node. The grammar
engine (``localguide.grammar``) then guides generation with the same language.
"""

from __future__ import annotations

import itertools

from ..grammar.cfg import CFG, Terminal
from ..grammar.rewrites import Repeats, simplify_generated
from ..regex.ast import EPS, Alt, Auto, Cls, Lit, Node, Ref, Rep, Seq
from ..regex.ast_dfa import Builder

# A sub-expression of at most this many positions (characters, repetitions expanded)
# becomes one terminal; larger ones become rules over smaller parts.
TERMINAL_SIZE = 16


def _kids(node: Node) -> tuple:
    if isinstance(node, (Seq, Alt)):
        return node.items
    if isinstance(node, Rep):
        return (node.item,)
    return ()


def sizes(root: Node) -> dict[int, int]:
    """Positions of every node of ``root`` (by id), repetitions expanded, capped at 2**30."""
    size: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in size:
            continue
        kids = _kids(node)
        if not ready and any(id(k) not in size for k in kids):
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        if isinstance(node, Ref):
            n = 1 << 30  # a nonterminal, never inside a terminal
        elif isinstance(node, Lit):
            n = len(node.text)
        elif isinstance(node, Cls):
            n = 1
        elif isinstance(node, (Seq, Alt)):
            n = sum(size[id(k)] for k in kids)
        elif isinstance(node, Rep):
            n = size[id(node.item)] * (node.hi if node.hi is not None else max(1, node.lo))
        elif isinstance(node, Auto):
            n = node.dfa.n_states
        else:
            n = 0
        size[id(node)] = min(n, 1 << 30)
    return size


def ast_to_cfg(root: Node, rules_of: dict | None = None, source: str = "JSON schema",
               terminal_size: int = TERMINAL_SIZE, builder: Builder | None = None,
               size: dict | None = None) -> CFG:
    """The grammar of ``root``'s language (not normalized: ``grammar.cfg.normalize`` it).

    ``rules_of``: the node of each ``Ref`` key (``CompiledSchema.rules``). ``builder``: the
    ``jsonschema_dfa.Builder`` of a failed automaton of ``root`` (when ``rules_of`` is empty),
    whose sub-DFAs are reused for the terminals (it is taken over); ``size``: ``sizes(root)``,
    when already computed (and ``rules_of`` is empty).
    """
    rules_of = rules_of or {}
    if size is None or rules_of:
        size = sizes(Seq((root,) + tuple(rules_of.values())))
    terminals: list[Terminal] = []
    by_language: dict[bytes, int] = {}
    rules: list[tuple[str, tuple]] = []
    sym: dict[int, object] = {}  # id(node) -> terminal index, nonterminal name, or None (the empty string)
    keep = []  # the nodes of ``sym``, alive so that their ids stay unique
    # One builder for all terminals: equal sub-expressions (by structure) are built once.
    if builder is None or rules_of:
        builder = Builder(Seq((root,) + tuple(rules_of.values())), 1 << 30)
    else:  # taken over: terminals have no state budget
        builder.max_states, builder.give_up = 1 << 30, None

    def terminal(node: Node) -> int:
        d = builder.dfa(node)
        key = d.transitions.tobytes() + d.accepting.tobytes()
        t = by_language.get(key)
        if t is None:
            t = by_language[key] = len(terminals)
            terminals.append(Terminal(f"t{t}", d))
        return t

    ref_names: dict = {}
    names = itertools.count()
    repeats = Repeats(lambda: f"rep{next(names)}", rules)
    stack = [(root, False)] + [(n, False) for n in rules_of.values()]
    while stack:
        node, ready = stack.pop()
        k = id(node)
        if k in sym:
            continue
        if isinstance(node, Ref):
            name = ref_names.get(node.key)
            if name is None:
                name = ref_names[node.key] = f"ref{len(ref_names)}"
            sym[k] = name
        elif node is EPS:
            sym[k] = None
        elif not isinstance(node, (Seq, Alt, Rep)) or size[k] <= terminal_size:
            sym[k] = terminal(node)
        else:
            kids = _kids(node)
            if not ready:
                stack.append((node, True))
                stack.extend((c, False) for c in kids if id(c) not in sym)
                continue
            name = f"n{len(sym)}"
            parts = [sym[id(c)] for c in kids]
            if isinstance(node, Seq):
                rules.append((name, tuple(p for p in parts if p is not None)))
            elif isinstance(node, Alt):
                rules += [(name, () if p is None else (p,)) for p in parts]
            else:
                item = () if parts[0] is None else (parts[0],)
                head = item * node.lo
                if node.hi is None:  # x{lo,}: x^lo x*
                    rules.append((name, head + ((repeats.star(item),) if item else ())))
                else:  # x{lo,hi}: x^lo then flat or blocked alternatives (``Repeats``)
                    rules.append((name, repeats.bounded(item, node.lo, node.hi)))
            sym[k] = name
        keep.append(node)
    for key, name in ref_names.items():
        body = sym[id(rules_of[key])]
        rules.append((name, () if body is None else (body,)))
    start = sym[id(root)]
    if not isinstance(start, str):
        start = "document"
        rules.append((start, () if sym[id(root)] is None else (sym[id(root)],)))
    return CFG(terminals, simplify_generated(rules, start), start, source=source)

