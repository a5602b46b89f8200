"""XGrammar's GrammarMatcher surface on the native matcher, call for call against real XGrammar.

Every test runs one sequence of calls on a native matcher and on ``xgrammar.GrammarMatcher`` over
the same grammar and vocabulary (the plain engine's matcher) and compares every result: fork,
accept_string, find_jump_forward_string / _tokens, traverse_draft_tree (random trees, rejected and
terminated nodes, the argument errors), the k-position fill, and the batch calls of the compat layer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xgrammar as xgr
from test_native import JSON_SMALL, TOY_TOKENS, _build
from toy_vocab import STOP_ID

from cfgzip_lab import xgrammar_compat as compat
from cfgzip_lab.native.draft import check_draft_tree
from cfgzip_lab.native.jump_forward import ForcedTokenIndex, valid_utf8_prefix
from cfgzip_lab.vocab import vocab_from_bytes
from cfgzip_lab.xgrammar_version import at_least

# Forced literals (jump-forward), a two-byte character with a shared first byte, and JSON inside.
FORCED = (
    'root ::= "{\\"name\\": " value ", \\"e\\": " accent "}"\naccent ::= "\\"é\\"" | "\\"è\\""\n'
    + JSON_SMALL.replace("root ::= value\n", "")
)
GRAMMARS = {"json": JSON_SMALL, "forced": FORCED}


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOY_TOKENS, stop_ids=[STOP_ID], special_ids=[30], vocab_size=36, name="toy")


@pytest.fixture(scope="module", params=sorted(GRAMMARS))
def pair(request, toy):
    """(native engine, plain XGrammar engines, vocabulary) for one grammar."""
    engines, native = _build(GRAMMARS[request.param], toy)
    return native, engines, toy


def _mask(matcher, vocab_size: int) -> torch.Tensor:
    out = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(out, 0)
    return out


def _walk(rng, native, xm, vocab_size: int, steps: int):
    """Random allowed tokens on both; at every step masks, completion and jump-forward are compared."""
    for _ in range(steps):
        if xm.is_terminated():
            break
        assert native.find_jump_forward_string() == xm.find_jump_forward_string()
        if at_least("0.2.9"):
            assert native.find_jump_forward_tokens() == xm.find_jump_forward_tokens()
        ours, theirs = native.next_vocab_bitmask(), _mask(xm, vocab_size)[0]
        theirs[-1] &= (1 << (vocab_size % 32)) - 1 if vocab_size % 32 else -1
        assert torch.equal(ours, theirs)
        allowed = [t for t in range(vocab_size) if (int(ours[t >> 5]) >> (t & 31)) & 1]
        if not allowed:
            break
        token = int(rng.choice(allowed))
        assert native.accept_token(token) and xm.accept_token(token)
        assert native.is_completed() == xm.is_completed()
        assert native.is_terminated() == xm.is_terminated()


def test_fork_is_independent_and_matches_xgrammar_forks(pair):
    native_engine, engines, vocab = pair
    rng = np.random.default_rng(0)
    native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
    _walk(rng, native, xm, vocab.vocab_size, 3)
    before = native.next_vocab_bitmask()
    twins = [(native.fork(), xm.fork()) for _ in range(3)]
    for i, (nf, xf) in enumerate(twins):
        _walk(np.random.default_rng(i + 1), nf, xf, vocab.vocab_size, 6)
        if nf.accepted_tokens:
            nf.rollback(1)
            xf.rollback(1)
            _walk(np.random.default_rng(i + 10), nf, xf, vocab.vocab_size, 2)
    assert torch.equal(native.next_vocab_bitmask(), before)  # the forks' writes never reach the original
    _walk(rng, native, xm, vocab.vocab_size, 8)
    assert native.fork()._history is native._history  # shared until a write: O(1)


@pytest.mark.parametrize(
    "text",
    ['{"name": ', '{"name": "ab", "e": "é"}', '{"name": [1', "[", "[1, 2]", '"ab"', "zz", "", '{"name": 1, "e": "\xc3'],
)
def test_accept_string_and_rollback_follow_xgrammar(pair, text):
    native_engine, engines, vocab = pair
    native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
    for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
        assert native.accept_string(piece) == xm.accept_string(piece), piece
        assert native.is_completed() == xm.is_completed()
        assert native.find_jump_forward_string() == xm.find_jump_forward_string()
        assert torch.equal(native.next_vocab_bitmask()[:1], _mask(xm, vocab.vocab_size)[0, :1])
    steps = len(native._tokens)
    native.rollback(steps)
    xm.rollback(steps)
    assert native.find_jump_forward_string() == xm.find_jump_forward_string()
    with pytest.raises(RuntimeError, match="Intended to rollback"):
        native.rollback(1)
    with pytest.raises(RuntimeError):
        xm.rollback(1)


def test_terminated_matcher_refuses_as_xgrammar(pair):
    native_engine, engines, vocab = pair
    native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
    text = '{"name": 1, "e": "é"}' if "accent" in native_engine.compiled.text else "[]"
    assert native.accept_string(text) and xm.accept_string(text)
    assert native.find_jump_forward_string() == xm.find_jump_forward_string() == ""
    assert native.find_jump_forward_tokens() == []
    assert native.accept_token(STOP_ID) and xm.accept_token(STOP_ID)
    assert not native.accept_string("a") and not xm.accept_string("a")
    assert native.find_jump_forward_tokens() == []
    with pytest.raises(RuntimeError, match="terminated"):
        native.find_jump_forward_string()
    with pytest.raises(RuntimeError):
        xm.find_jump_forward_string()
    assert native.stop_token_ids == list(xm.stop_token_ids) == [STOP_ID]
    assert native.max_rollback_tokens == xm.max_rollback_tokens == -1
    assert native.temperature is None and xm.temperature is None


def _random_tree(rng, n: int, vocab_size: int, allowed_first: list[int]):
    """A random draft tree of n nodes (children lists), as XGrammar's three vectors."""
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    nxt, sib = [-1] * n, [-1] * n
    last_child: dict[int, int] = {}
    for i in range(1, n):
        p = parent[i]
        if p in last_child:
            sib[last_child[p]] = i
        else:
            nxt[p] = i
        last_child[p] = i
    # mostly tokens the grammar may allow, some it surely refuses, a stop token, an id past V
    pool = allowed_first + [0, 1, 4, STOP_ID, vocab_size + 1, -1]
    tokens = [int(rng.choice(pool)) for _ in range(n)]
    as_tensor = [torch.tensor(v, dtype=torch.int64) for v in (nxt, sib, tokens)]
    return as_tensor


def test_traverse_draft_tree_matches_xgrammar_on_random_trees(pair):
    native_engine, engines, vocab = pair
    rng = np.random.default_rng(3)
    for trial in range(12):
        native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
        _walk(np.random.default_rng(trial), native, xm, vocab.vocab_size, trial % 4)
        allowed = [0]
        if not native.is_terminated():
            row = native.next_vocab_bitmask()
            allowed = [t for t in range(vocab.vocab_size) if (int(row[t >> 5]) >> (t & 31)) & 1] or [0]
        n = int(rng.integers(1, 40))
        tree = _random_tree(rng, n, vocab.vocab_size, allowed + list(range(vocab.vocab_size)))
        ours = torch.full((n, 2), 7, dtype=torch.int32)
        theirs = ours.clone()
        before = list(native.accepted_tokens)
        assert native.traverse_draft_tree(*tree, ours) == xm.traverse_draft_tree(*tree, theirs)
        # bits past V in a filled row are 0 here and 0 or 1 in XGrammar: compare the vocabulary's bits
        tail = (1 << (vocab.vocab_size % 32)) - 1
        ours[:, -1] &= tail
        theirs[:, -1] = torch.where(theirs[:, -1] == 7, theirs[:, -1], theirs[:, -1] & tail)
        ours[:, -1] = torch.where(ours[:, -1] == 7 & tail, torch.tensor(7, dtype=torch.int32), ours[:, -1])
        assert torch.equal(ours, theirs), (trial, tree)
        assert native.accepted_tokens == before
        # the compat layer (tail bits as XGrammar leaves them) gives XGrammar's whole tensor
        wrapped, again = compat.GrammarMatcher(native.fork()), torch.full((n, 2), 7, dtype=torch.int32)
        assert wrapped.traverse_draft_tree(*tree, again)
        assert torch.equal(again[:, :-1], theirs[:, :-1])


def test_traverse_draft_tree_terminated_and_timeout(toy):
    engines, native_engine = _build('root ::= "a"\n', toy)
    native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
    a = toy.encode("a")[0]
    tree = [torch.tensor(v, dtype=torch.int64) for v in ([1, 2, -1], [-1, -1, -1], [0, a, STOP_ID])]
    ours, theirs = xgr.allocate_token_bitmask(3, toy.vocab_size), xgr.allocate_token_bitmask(3, toy.vocab_size)
    assert native.traverse_draft_tree(*tree, ours) and xm.traverse_draft_tree(*tree, theirs)
    assert torch.equal(ours[2], theirs[2]) and not ours[2].any()  # the stop token's row: zeros
    assert torch.equal(ours[:2, 0], theirs[:2, 0])
    timed = torch.zeros(3, dtype=torch.float32)
    assert native.traverse_draft_tree(*tree, ours, time_threshold=1e-12, temperatures=timed) is False
    assert (timed == -1).all() and native.accepted_tokens == []


BAD_TREES = {
    "bitmask_rows": (([1, -1], [-1, -1], [0, 1]), (3, 2), "batch size must match"),
    "lengths": (([1, -1], [-1, -1, -1], [0, 1]), (2, 2), "same length"),
    "root_sibling": (([-1, -1], [1, -1], [0, 1]), (2, 2), "root node must not have siblings"),
    "out_of_bounds": (([5, -1], [-1, -1], [0, 1]), (2, 2), "out of bounds"),
    "cycle": (([1, 0], [-1, -1], [0, 1]), (2, 2), "root node must not be the child"),
    "shared_node": (([2, 2, -1], [-1, -1, -1], [0, 1, 1]), (3, 2), "cycles or shared nodes"),
    "empty": (([], [], []), (0, 2), "must not be empty"),
}


@pytest.mark.parametrize("name", sorted(BAD_TREES))
def test_draft_tree_errors_as_xgrammar(pair, name):
    native_engine, engines, vocab = pair
    (nxt, sib, tok), shape, message = BAD_TREES[name]
    args = [torch.tensor(v, dtype=torch.int64) for v in (nxt, sib, tok)] + [torch.zeros(shape, dtype=torch.int32)]
    with pytest.raises(RuntimeError, match=message):
        native_engine.matcher().traverse_draft_tree(*args)
    with pytest.raises(RuntimeError, match=message):
        engines.plain().xgrammar_matcher.traverse_draft_tree(*args)


def test_draft_tree_dtype_errors():
    ok = torch.tensor([-1], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="1D int64"):
        check_draft_tree(ok.int(), ok, ok, torch.zeros(1, 2, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="2D int32"):
        check_draft_tree(ok, ok, ok, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="1D float32"):
        check_draft_tree(ok, ok, ok, torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int64))


def test_k_position_fill_equals_step_by_step_masks(pair):
    native_engine, engines, vocab = pair
    rng = np.random.default_rng(5)
    native, xm = native_engine.matcher(), engines.plain().xgrammar_matcher
    _walk(rng, native, xm, vocab.vocab_size, 2)
    draft, probe = [], native.fork()
    for _ in range(6):  # a draft the grammar allows, then a token it refuses
        row = probe.next_vocab_bitmask()
        allowed = [t for t in range(vocab.vocab_size) if (int(row[t >> 5]) >> (t & 31)) & 1 and t != STOP_ID]
        if not allowed:
            break
        draft.append(int(rng.choice(allowed)))
        probe.accept_token(draft[-1])
    before = native.accepted_tokens
    for tokens in (draft, draft[:2] + [30] + draft[2:]):
        out = torch.full((len(tokens) + 2, 2), 7, dtype=torch.int32)
        filled = native.fill_draft_bitmasks(tokens, out, index=1)
        expected = min(len(tokens), tokens.index(30) if 30 in tokens else len(tokens)) + 1
        assert filled == expected
        for i in range(filled):
            theirs = _mask(xm, vocab.vocab_size)[0]
            theirs[-1] &= (1 << (vocab.vocab_size % 32)) - 1
            assert torch.equal(out[1 + i], theirs), i
            if i < len(tokens) and i < filled - 1:
                assert xm.accept_token(tokens[i])
        xm.rollback(filled - 1)
        assert (out[0] == 7).all() and (out[1 + filled :] == 7).all()
        assert native.accepted_tokens == before  # the state as it was


def test_compat_k_position_fill_equals_the_native_one(pair):
    """The XGrammar-interface matcher's fill_draft_bitmasks: the native matcher's rows, the state kept."""
    native_engine, engines, vocab = pair
    rng = np.random.default_rng(11)
    native = native_engine.matcher()
    _walk(rng, native, engines.plain().xgrammar_matcher, vocab.vocab_size, 2)
    ours = compat.GrammarMatcher(native.fork())
    draft, probe = [], native.fork()
    for _ in range(5):
        row = probe.next_vocab_bitmask()
        allowed = [t for t in range(vocab.vocab_size) if (int(row[t >> 5]) >> (t & 31)) & 1 and t != STOP_ID]
        if not allowed:
            break
        draft.append(int(rng.choice(allowed)))
        probe.accept_token(draft[-1])
    for tokens in (draft, draft[:1] + [30] + draft[1:]):
        want = torch.zeros((len(tokens) + 1, 2), dtype=torch.int32)
        got = torch.zeros_like(want)
        filled = native.fill_draft_bitmasks(tokens, want)
        assert ours.fill_draft_bitmasks(tokens, got) == filled
        assert torch.equal(got[:filled], want[:filled])
        now = torch.zeros_like(want[:1])
        ours.fill_next_token_bitmask(now)
        assert torch.equal(now[0], want[0])  # the state as it was


def test_batch_calls_check_their_arguments_as_xgrammar(pair):
    native_engine, engines, vocab = pair
    ours = [compat.GrammarMatcher(native_engine.matcher()) for _ in range(2)]
    theirs = [engines.plain().xgrammar_matcher, engines.plain().xgrammar_matcher]
    batch, xbatch = compat.BatchGrammarMatcher(1), xgr.BatchGrammarMatcher(1)
    for call, args in (
        ("batch_accept_token", ([0],)),
        ("batch_accept_string", (["["],)),
        ("batch_rollback", ([1, 1, 1],)),
    ):
        with pytest.raises(RuntimeError, match="should be the same"):
            getattr(batch, call)(ours, *args)
        with pytest.raises(RuntimeError, match="should be the same"):
            getattr(xbatch, call)(theirs, *args)
    mask = xgr.allocate_token_bitmask(2, vocab.vocab_size)
    for bad in ([0], [0, 5]):
        with pytest.raises(RuntimeError):
            batch.batch_fill_next_token_bitmask(ours, mask, bad)
        with pytest.raises(RuntimeError):
            xbatch.batch_fill_next_token_bitmask(theirs, mask, bad)
    took = batch.batch_accept_string(ours, ["[", "{"])
    assert took == xbatch.batch_accept_string(theirs, ["[", "{"])
    assert batch.batch_accept_token(ours, [12, 12]) == xbatch.batch_accept_token(theirs, [12, 12])
    a, b = xgr.allocate_token_bitmask(2, vocab.vocab_size), xgr.allocate_token_bitmask(2, vocab.vocab_size)
    batch.batch_fill_next_token_bitmask(ours, a, [1, 0])
    xbatch.batch_fill_next_token_bitmask(theirs, b, [1, 0])
    tail = (1 << (vocab.vocab_size % 32)) - 1  # XGrammar writes bits past V as 0 or 1: the vocabulary's only
    a[:, -1] &= tail
    b[:, -1] &= tail
    assert torch.equal(a, b)
    steps = [len(m.engine._tokens) for m in ours]
    batch.batch_rollback(ours, steps)
    xbatch.batch_rollback(theirs, steps)
    batch.batch_fill_next_token_bitmask(ours, a)
    xbatch.batch_fill_next_token_bitmask(theirs, b)
    a[:, -1] &= tail
    b[:, -1] &= tail
    assert torch.equal(a, b)
    forked = ours[1].fork()
    assert forked.accept_token(12) == theirs[1].fork().accept_token(12)
    if at_least("0.2.9"):  # 0.2.8 has no find_jump_forward_tokens to compare with
        assert forked.find_jump_forward_tokens() == theirs[1].find_jump_forward_tokens()


def test_forced_token_index_and_utf8_prefix():
    vocab = vocab_from_bytes([b"ab", b"a", b"abc", b"ab", b"b", b""], stop_ids=[5], name="t")
    index = ForcedTokenIndex.from_vocab(vocab)
    assert index.longest_match(b"abd", 0) == (0, 2, True)  # smallest id of equal bytes; "abc" extends it
    assert index.longest_match(b"abc", 0) == (2, 3, False)
    assert index.longest_match(b"xb", 0) == (-1, 0, False)
    assert valid_utf8_prefix("aé".encode()[:-1]) == "a" and valid_utf8_prefix(b"\xa9x") == ""


# How a stop id is read (cfgzip_lab.native.stop_policy): its text, which some grammars take, and
# terminate_without_stop_token, checked against XGrammar under each release (0.2.9 reads the text).
STOP_VOCAB = ["x", "<|eot|>", "a", "|>", "<", "</s>", "b", "\n"]
STOP_GRAMMARS = [
    'root ::= "x" [^\\n]* "|>"',  # "<|eot|>" as text completes it after "x"
    'root ::= "x" [^\\n]*',  # complete after "x"; the stop texts keep it complete
    'root ::= "x" "a"?',  # complete after "x", and may go on
    'root ::= "x" ("a" | "</s>") "b"?',  # "</s>" (a stop id) as text, then more
    'root ::= "x" "b"',  # no stop text fits anywhere
]


def _bits(matcher, vocab_size: int) -> list[int]:
    row = _mask(matcher, vocab_size)[0].numpy().view(np.uint32)
    return [int(row[t // 32] >> (t % 32)) & 1 for t in range(vocab_size)]


def _stop_state(matcher) -> tuple:
    return matcher.is_completed(), matcher.is_terminated()


@pytest.mark.parametrize("override", [None, [1]], ids=["tokenizer-stops", "override"])
@pytest.mark.parametrize("without_stop", [False, True], ids=["stop-token", "terminate-without"])
@pytest.mark.parametrize("grammar", STOP_GRAMMARS)
def test_stop_tokens_are_read_as_xgrammar_reads_them(grammar, without_stop, override):
    """At every step of random walks: completion and termination, the mask's bits, and what every
    token (stop ids included) would do, fork by fork; a matcher ended by a stop id refuses to fill.

    XGrammar contradicts itself in two places, allowed there only: with an override, its mask leaves
    out a tokenizer stop id that is no longer a stop (its compiler never matches it) while its
    ``accept_token`` takes it as text (the native mask follows ``accept_token``); 0.2.8 with
    ``terminate_without_stop_token`` sets the stop bits of a complete sentence and refuses the stop
    token (the native mask is XGrammar's)."""
    from cfgzip_lab.native.from_xgrammar import native_matcher

    info = xgr.TokenizerInfo(STOP_VOCAB, stop_token_ids=[1, 5])
    compiled = xgr.GrammarCompiler(info).compile_grammar(grammar)
    kwargs = {"terminate_without_stop_token": without_stop, "override_stop_tokens": override}
    size = info.vocab_size
    rng = np.random.default_rng(7)
    for _ in range(6):
        ours, theirs = native_matcher(compiled, **kwargs), xgr.GrammarMatcher(compiled, **kwargs)
        for _step in range(6):
            assert _stop_state(ours) == _stop_state(theirs)
            try:
                want = _bits(theirs, size)
            except RuntimeError:  # ended by a stop id
                with pytest.raises(RuntimeError, match="terminated"):
                    _bits(ours, size)
                assert not ours.accept_token(0) and not theirs.accept_token(0)
                ours.rollback(1)
                theirs.rollback(1)
                assert _stop_state(ours) == _stop_state(theirs)
                assert _bits(ours, size) == _bits(theirs, size)
                break
            got = _bits(ours, size)
            allowed = []
            for token in range(size):
                mine, ref = ours.fork(), theirs.fork()
                took = ref.accept_token(token)
                assert mine.accept_token(token) == took, token
                assert _stop_state(mine) == _stop_state(ref), token
                allowed += [token] if took else []
                if want[token] == took:
                    assert got[token] == want[token], token
                elif override is not None and token in set(info.stop_token_ids) - set(override):
                    assert got[token] == took, token  # an override made it text: ours follows accept_token
                else:  # 0.2.8 sets a stop bit when complete, and terminate_without_stop_token refuses it
                    assert not at_least("0.2.9") and without_stop and want[token] == 1, token
                    assert token in (override or info.stop_token_ids) and got[token] == want[token], token
            if not allowed:
                break
            token = int(rng.choice(allowed))
            assert ours.accept_token(token) and theirs.accept_token(token)
