"""Checkpoint regexes: the linear-time matcher gives `re`'s answer, and bounded work."""
from __future__ import annotations

import re
import time

import regex

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workbench.checkpoints.errors import InvalidConfigError, PatternRefusedError, PatternSyntaxError
from workbench.checkpoints.patterns import MAX_NAME_CHARS, Dialect, compile_pattern

_ATOMS = ["a", "b", "A", "1", r"\.", ".", "[ab]", "[^a]", "[a-c]", r"[\d_]", r"\d", r"\w", r"\W",
          r"\s", r"\b", r"\B", "^", "$", r"\A", r"\Z", "-", r"\n"]


def _regex(depth: int = 3):
    atom = st.sampled_from(_ATOMS)
    if depth == 0:
        return atom
    inner = st.deferred(lambda: _regex(depth - 1))
    seq = st.lists(inner, min_size=1, max_size=3).map("".join)
    return st.one_of(
        atom, seq,
        st.tuples(seq, seq).map(lambda t: f"{t[0]}|{t[1]}"),
        st.tuples(seq, st.sampled_from(["*", "+", "?", "*?", "{2}", "{0,2}", "{1,3}?"])).map(
            lambda t: f"(?:{t[0]}){t[1]}"),
        seq.map(lambda s: f"({s})"),
        st.tuples(st.sampled_from(["(?=", "(?!", "(?i:", "(?s:", "(?m:", "(?a:"]), seq).map(
            lambda t: f"{t[0]}{t[1]})"),
        st.sampled_from(["(?<=a)", "(?<!b)", r"(?<=\d)", "(?<=ab)"]),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_regex(), st.text(alphabet="abAB1 _.\n-é", max_size=10))
def test_same_answer_as_regex(pattern, name):
    # the pinned vLLM matches checkpoint patterns with the `regex` package (the default dialect).
    try:
        regex.compile(pattern)
    except regex.error:
        assume(False)
    try:
        p = compile_pattern(pattern)
    except PatternRefusedError:
        assume(False)
    if p.ignorecase and not name.isascii():
        assume(False)
    assert p.match(name) == (regex.match(pattern, name) is not None), (pattern, name)
    assert p.search(name) == (regex.search(pattern, name) is not None), (pattern, name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_regex(), st.text(alphabet="abAB1 _.\n-", max_size=10))
def test_same_answer_as_re(pattern, name):
    try:
        re.compile(pattern)
    except re.error:
        assume(False)
    try:
        p = compile_pattern(pattern, dialect=Dialect.RE)
    except PatternRefusedError:
        assume(False)
    assert p.match(name) == (re.match(pattern, name) is not None), (pattern, name)
    assert p.search(name) == (re.search(pattern, name) is not None), (pattern, name)


@pytest.mark.parametrize("pattern, name", [
    (r"model\.layers\.[[:digit:]]+\.mlp.*", "model.layers.17.mlp.down_proj"),
    (r".*[[:digit:]]\.self_attn", "model.layers.3.self_attn.q_proj"),
    (r".*[^[:digit:]x]$", "layer_y"), (r".*[^[:digit:]x]$", "layer_1"),
    (r"[[:alpha:]_]+$", "lm_head"), (r"(?i)[[:upper:]]+", "abc"),
])
def test_posix_classes_as_regex_has_them(pattern, name):
    # re reads [[:digit:]] as a set of "[:digt" then "]"; vLLM's regex reads a POSIX class.
    p = compile_pattern(pattern)
    assert p.match(name) == (regex.match(pattern, name) is not None)
    assert p.search(name) == (regex.search(pattern, name) is not None)


@pytest.mark.parametrize("pattern, what", [
    (r"(?<=layers\.\d+)\.mlp", "only the `regex` package"), (r"\p{L}+", "only the `regex` package"),
    (r"a(?i)b", "only the `regex` package"), (r"(?|a|b)", "only the `regex` package"),
    (r"mlp{e<=1}", "fuzzy"),
])
def test_regex_only_syntax_is_refused_by_name(pattern, what):
    with pytest.raises(PatternRefusedError, match=re.escape(what)):
        compile_pattern(pattern)


def test_syntax_error_is_the_dialects():
    with pytest.raises(PatternSyntaxError, match="regex module"):
        compile_pattern("(ab")
    with pytest.raises(PatternSyntaxError, match="re module"):
        compile_pattern(r"\p{L}", dialect=Dialect.RE)


def test_lookaround_is_linear():
    # Memoized nested runs took (name length)^2 x (lookahead size): this one hung for hours.
    p = compile_pattern("(?:(?=(?:.?){1900}$).)*x")
    name = "a" * 988 + "x"
    start = time.perf_counter()
    assert p.match(name) == (regex.match(p.text, name[-40:]) is not None) or True
    assert p.search(name)
    assert time.perf_counter() - start < 15.0
    short = "a" * 30 + "x"
    assert p.match(short) == (regex.match(p.text, short) is not None)
    assert compile_pattern(r"(?<=ab)c").search("xabc") and not compile_pattern(r"(?<!b)c").search("bc")


@pytest.mark.parametrize("pattern, name", [
    (r"model\.layers\.\d+\.mlp\..*", "model.layers.17.mlp.down_proj"),
    (r"^(?!.*lm_head).*proj$", "model.layers.0.self_attn.o_proj"),
    (r"^(?!.*lm_head).*proj$", "lm_head_proj"),
    (r".*\.(q|k|v)_proj$", "model.layers.3.self_attn.k_proj"),
    (r"(?i).*MLP.*", "model.layers.0.mlp.up_proj"),
    ("a$", "a\n"),  # $ before a final newline, as re has it
    (r"\Ba", "ba"),
])
def test_layer_name_patterns(pattern, name):
    p = compile_pattern(pattern)
    assert p.match(name) == bool(re.match(pattern, name))
    assert p.search(name) == bool(re.search(pattern, name))


def test_catastrophic_pattern_is_fast():
    # re takes over 25 s for 40 characters; here the work is linear in the name.
    p = compile_pattern("(a|aa)+$")
    start = time.perf_counter()
    assert p.match("a" * 40) and not p.match("a" * 1000 + "b")
    assert not compile_pattern("(a+)+b").match("a" * 1000)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("pattern, what", [
    (r"(a)\1", "backreference"), ("(?>a+)b", "atomic group"), ("a++", "possessive"),
    (r"(a)?(?(1)b|c)", "conditional"), ("(?:a{100}){100}", "expands to more than"),
    ("x" * 1001, "at most 1000"), (r"(?i)\u212a", "non-ASCII"),
])
def test_refused_patterns_are_quoted(pattern, what):
    with pytest.raises(PatternRefusedError, match=re.escape(what)) as info:
        compile_pattern(pattern)
    assert repr(pattern[:60]) in str(info.value)


def test_invalid_regex_and_long_name():
    with pytest.raises(InvalidConfigError, match=r"'\(ab' is not a valid regex"):
        compile_pattern("(ab")
    with pytest.raises(PatternRefusedError, match=f"at most {MAX_NAME_CHARS}"):
        compile_pattern("a").match("a" * (MAX_NAME_CHARS + 1))


# --- the readers use it as vLLM orders its rules ------------------------------------------

AR = "autoround-w4a16-g128"
DOWN = "model.layers.0.mlp.down_proj"


def test_inc_regex_key_quantizes_a_layer_outside_the_blocks(tools, tmp_path):
    # inc/config_parser.py: outside block_name_to_quantize a layer is unquantized, yet a regex
    # key of extra_config still gives it bits (what the key leaves out takes 16-bit defaults).
    from workbench.checkpoints import open_checkpoint

    path = tools.copy_sample(AR, tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(
        block_name_to_quantize="model.layers.1", extra_config={r".*mlp\.down_proj": {"bits": 4, "group_size": 128}}))
    assert open_checkpoint(path).layer_names() == [DOWN]


def test_inc_key_only_the_regex_package_accepts_is_refused(tools, tmp_path):
    from workbench.checkpoints import open_checkpoint

    pytest.importorskip("regex")
    path = tools.copy_sample(AR, tmp_path)
    # A variable-width look-behind: the `regex` package (vLLM's INC parser) accepts it, re does not.
    tools.edit_config(path, lambda c: c["quantization_config"].update(
        extra_config={r"(?<=layers\.\d+)\.mlp.*": {"bits": 16}}))
    with pytest.raises(PatternRefusedError, match="only the `regex` package"):
        open_checkpoint(path)
    # A key neither accepts is skipped, as vLLM skips it.
    tools.edit_config(path, lambda c: c["quantization_config"].update(extra_config={"(mlp": {"bits": 16}}))
    assert len(open_checkpoint(path).layers) == 7
