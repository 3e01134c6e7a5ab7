"""Plan and triple parsers: tolerant of model output, never raising (hypothesis fuzzing)."""
from hypothesis import given, strategies as st

from rasfast.parse import (NoRetrieval, SubQuery, Sufficient, clean_triples, format_triples,
                                    parse_plan, parse_triples)


def test_plan_tags_any_case_and_extra_text():
    assert parse_plan("[NO_RETRIEVAL]") == NoRetrieval()
    assert parse_plan("I think: [no retrieval] needed") == NoRetrieval()
    assert parse_plan("[SUFFICIENT]") == Sufficient()
    assert parse_plan("  sufficient.") == Sufficient()
    assert parse_plan("[SUBQ] Where was Alda born?") == SubQuery("Where was Alda born?")
    assert parse_plan("[subq]: 'Where was Alda born?'\nbecause ...") == SubQuery("Where was Alda born?")
    assert parse_plan("Plan: [SubQuery] capital of Velland [SUFFICIENT]") == SubQuery("capital of Velland")
    assert parse_plan("SUBQ Who founded Tarsk Works?") == SubQuery("Who founded Tarsk Works?")


def test_plan_missing_tags():
    # no tag: the text is read as a sub-query; nothing at all means sufficient
    assert parse_plan("Who founded Tarsk Works?") == SubQuery("Who founded Tarsk Works?")
    assert parse_plan("") == Sufficient()
    assert parse_plan("   \n ") == Sufficient()
    assert parse_plan("[SUBQ]") == Sufficient()      # a tag with no text asks for nothing
    assert parse_plan(None) == Sufficient()


def test_plan_never_keeps_the_prefix():
    for raw in ["[SUBQ] x y", "[SUBQ]x y", "[ SUBQ ] x y", "[sub_q] x y", "subq: x y"]:
        a = parse_plan(raw)
        assert a == SubQuery("x y"), raw
        assert "subq" not in a.text.lower()


def test_triples_well_formed_round_trip():
    ts = [("Alda Morven", "born in", "Tarsk"), ("Tarsk", "country", "Velland")]
    text = format_triples(ts)
    assert text == "(S> Alda Morven| P> born in| O> Tarsk), (S> Tarsk| P> country| O> Velland)"
    r = parse_triples(text)
    assert r.triples == ts and r.dropped == 0


def test_triples_keep_parentheses_inside_names():
    """Wikipedia-style titles ("The Prestige (film)", "Boston (Lincolnshire)") are common
    subjects and objects: their parentheses belong to the name, in every field."""
    ts = [("The Prestige (film)", "directed by", "Christopher Nolan"),
          ("Kirton End", "location", "Boston (Lincolnshire)"),
          ("Boston (Lincolnshire)", "population", "35,124"),
          ("X (a) (b)", "p (q)", "Y (c (d))")]
    r = parse_triples(format_triples(ts))
    assert r.triples == ts and r.dropped == 0
    # a model that leaves the list's own parenthesis unclosed or doubled still parses
    assert parse_triples("((S> A (x)| P> b| O> c (y)))").triples == [("A (x)", "b", "c (y)")]
    assert parse_triples("(S> A| P> b| O> c").triples == [("A", "b", "c")]


def test_triples_tolerant():
    txt = ("Here are the triples: (S> A| P> b| O> C)(S> D |P> e| O> F) junk "
           "(S> G| P> h| O> I (S> J| P> k| O> L)), (S> M| P> n)")
    r = parse_triples(txt)
    assert r.triples == [("A", "b", "C"), ("D", "e", "F"), ("G", "h", "I"), ("J", "k", "L")]
    assert r.dropped == 1                              # (S> M| P> n) has no object


def test_triples_dedup_and_empty_fields():
    r = parse_triples("(S> A| P> b| O> C), (S> A| P> b| O> C), (S> | P> b| O> C), (S> A| P> | O> C)")
    assert r.triples == [("A", "b", "C")]
    assert r.dropped == 2


def test_triples_no_markers():
    assert parse_triples("").triples == []
    r = parse_triples("(Alda, born in, Tarsk)")      # a mangled triple is counted as dropped
    assert r.triples == [] and r.dropped == 1


def test_clean_triples_drops_malformed():
    raw = [["a", "b", "c"], ["a", "b"], ["a", float("nan"), "c"], "abc", [" a ", "b", "c "], None]
    assert clean_triples(raw) == [("a", "b", "c")]


_ALPHABET = st.sampled_from(list("SPO>|(),[] \n\tabcxyz_:'\"") + ["S>", "P>", "O>", "[SUBQ]",
                                                                   "[SUFFICIENT]", "[NO_RETRIEVAL]", "é", "\x00"])


@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_fuzz_structured_garbage_never_raises(text):
    r = parse_triples(text)
    assert r.dropped >= 0
    for t in r.triples:
        assert len(t) == 3 and all(isinstance(x, str) and x for x in t)
    a = parse_plan(text)
    assert isinstance(a, (NoRetrieval, Sufficient, SubQuery))
    if isinstance(a, SubQuery):
        assert a.text and a.text == a.text.strip()


@given(st.text(max_size=200))
def test_fuzz_random_text_never_raises(text):
    parse_triples(text)
    parse_plan(text)


@given(st.lists(st.tuples(*[st.text(alphabet=st.characters(blacklist_characters="|()>,",
                                                            blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
                                    min_size=1, max_size=12)] * 3), max_size=6))
def test_fuzz_round_trip(triples):
    import re
    clean = [tuple(re.sub(r"\s+", " ", x).strip(" \t\r\n|,;()[]{}\"'") for x in t) for t in triples]
    clean = [t for t in clean if all(t) and not any(re.search(r"[SPO]\s*>", x, re.I) for x in t)]
    clean = list(dict.fromkeys(clean))
    assert parse_triples(format_triples(clean)).triples == clean
