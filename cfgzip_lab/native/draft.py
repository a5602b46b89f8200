"""Draft-tree masks for speculative decoding: XGrammar's ``traverse_draft_tree`` over any matcher.

A draft tree (EAGLE, MTP) is given as three int64 vectors of one length N: ``retrieve_next_token[i]``
is node i's first child, ``retrieve_next_sibling[i]`` its next sibling (-1: none), and
``draft_tokens[i]`` the token at node i. Node 0 is the root: its token is the one the target model
already sampled, so it is not accepted again; row 0 gets the mask after the current state.

The semantics follow ``TraverseDraftTreeRecursive`` and ``GrammarMatcher::TraverseDraftTree`` of
XGrammar 0.2.8/0.2.9 (``cpp/grammar_matcher.cc``; read, not copied), node by node:

- a non-root node is *allowed* when its token's bit is set in its parent's row (ids outside the
  row's bits are not); an allowed token is accepted by the matcher, which may still refuse it;
- a node that was accepted and left the matcher running gets its mask in its row, and its children
  are visited; a node that was refused, not allowed, or that terminated the matcher (a stop
  token) gets a row of zeros; the rows of nodes under such a node are not written;
- every token accepted on the way is rolled back, so the matcher ends in the state it started in;
- with ``time_threshold`` > 0, a non-root allowed node met after that many seconds stops the
  traversal: it returns False (rows already written stay) and the state is restored.

The checks before the traversal raise ``RuntimeError`` with XGrammar's messages (shapes, dtypes,
CPU tensors, the edges forming a tree rooted at node 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["check_draft_tree", "traverse_draft_tree"]

_ROLLBACK = ("rollback",)  # a stack entry: undo the token of the node whose children were just visited


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def check_draft_tree(
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    draft_tokens: torch.Tensor,
    token_bitmask: torch.Tensor,
    temperatures: torch.Tensor | None = None,
) -> None:
    """Raise ``RuntimeError`` (XGrammar's messages) unless the arguments describe a draft tree."""
    import torch

    for tensor, name in (
        (retrieve_next_token, "retrieve_next_token"),
        (retrieve_next_sibling, "retrieve_next_sibling"),
        (draft_tokens, "draft_tokens"),
    ):
        _check(
            isinstance(tensor, torch.Tensor) and tensor.dim() == 1 and tensor.dtype == torch.int64,
            f"The {name} tensor must be a 1D int64 tensor",
        )
    _check(
        isinstance(token_bitmask, torch.Tensor) and token_bitmask.dim() == 2 and token_bitmask.dtype == torch.int32,
        "The token_bitmask tensor must be a 2D int32 tensor",
    )
    if temperatures is not None:
        _check(
            isinstance(temperatures, torch.Tensor) and temperatures.dim() == 1 and temperatures.dtype == torch.float32,
            "The temperatures tensor must be a 1D float32 tensor",
        )
    named = [
        (retrieve_next_token, "retrieve_next_token"),
        (retrieve_next_sibling, "retrieve_next_sibling"),
        (draft_tokens, "draft_tokens"),
        (token_bitmask, "token_bitmask"),
    ]
    if temperatures is not None:
        named.append((temperatures, "temperatures"))
    for tensor, name in named:
        _check(tensor.device.type == "cpu", f"The {name} tensor must be on CPU")
    n = retrieve_next_token.shape[0]
    _check(
        n == retrieve_next_sibling.shape[0],
        "The retrieve_next_token and retrieve_next_sibling tensors must have the same length",
    )
    _check(n == draft_tokens.shape[0], "The retrieve_next_token and draft_tokens tensors must have the same length")
    _check(n == token_bitmask.shape[0], "The token_bitmask batch size must match the number of nodes in the tree")
    if temperatures is not None:
        _check(n == temperatures.shape[0], "The temperatures size must match the number of nodes in the tree")
    _check(n > 0, "The draft tree must not be empty")
    nxt = retrieve_next_token.numpy()
    sib = retrieve_next_sibling.numpy()
    _check(int(sib[0]) == -1, "The root node must not have siblings")
    for i in range(n):
        for values, name in ((nxt, "retrieve_next_token"), (sib, "retrieve_next_sibling")):
            v = int(values[i])
            _check(-1 <= v < n, f"{name}[{i}] = {v} is out of bounds: it should be in [-1, {n}).")
    targets = np.concatenate([nxt[nxt >= 0], sib[sib >= 0]])
    in_degree = np.bincount(targets, minlength=n) if targets.size else np.zeros(n, dtype=np.int64)
    _check(int(in_degree[0]) == 0, "The root node must not be the child or sibling of a node")
    for i in np.flatnonzero(in_degree > 1).tolist():
        _check(
            False,
            f"Node {i} is the target of {int(in_degree[i])} retrieve_next_token / retrieve_next_sibling "
            "entries; the draft tree must not contain cycles or shared nodes.",
        )


def traverse_draft_tree(
    matcher: Any,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    draft_tokens: torch.Tensor,
    token_bitmask: torch.Tensor,
    fill_row: Callable[[torch.Tensor, int], Any],
    time_threshold: float = -1.0,
    temperatures: torch.Tensor | None = None,
) -> bool:
    """Fill ``token_bitmask[i]`` for every reachable node i of the draft tree; see the module text.

    Parameters
    ----------
    matcher
        Anything with ``accept_token``, ``rollback`` and ``is_terminated`` (a native matcher, a
        compat ``GrammarMatcher``); its state is the same after the call.
    fill_row
        ``fill_row(token_bitmask, i)`` writes the matcher's current mask into row i.
    time_threshold
        Seconds; <= 0: no limit.
    temperatures
        Filled with -1 for every node (no grammar here sets a temperature).

    Returns
    -------
    bool
        False when the time threshold cut the traversal short.

    Raises
    ------
    RuntimeError
        From :func:`check_draft_tree`.
    """
    check_draft_tree(retrieve_next_token, retrieve_next_sibling, draft_tokens, token_bitmask, temperatures)
    if temperatures is not None:
        temperatures.fill_(-1.0)
    nxt = retrieve_next_token.tolist()
    sib = retrieve_next_sibling.tolist()
    tokens = draft_tokens.tolist()
    rows = token_bitmask.numpy()
    row_bits = rows.shape[1] * 32
    start = time.monotonic()
    # Depth first, as XGrammar's recursion: a node, then its children (its token still accepted),
    # then its undo, then its next sibling. An entry is (node, parent), or _ROLLBACK.
    stack: list = [(0, -1)]
    while stack:
        entry = stack.pop()
        if entry is _ROLLBACK:
            matcher.rollback(1)
            continue
        node, parent = entry
        if sib[node] != -1:
            stack.append((sib[node], parent))
        if node == 0:
            accepted = True
        else:
            token = tokens[node]
            accepted = 0 <= token < row_bits and (int(rows[parent, token >> 5]) >> (token & 31)) & 1 == 1
            if accepted and time_threshold > 0 and time.monotonic() - start > time_threshold:
                matcher.rollback(stack.count(_ROLLBACK))
                return False
            accepted = accepted and bool(matcher.accept_token(token))
        if not accepted:
            rows[node] = 0
            continue
        if matcher.is_terminated():
            rows[node] = 0
            if node != 0:
                matcher.rollback(1)
            continue
        fill_row(token_bitmask, node)
        if node != 0:
            stack.append(_ROLLBACK)
        if nxt[node] != -1:
            stack.append((nxt[node], node))
    return True
