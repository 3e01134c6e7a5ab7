"""The reader contract (rasfast.llm.reader): one instruction family, answer shape, token budget
and post-processing for every system's final answer; fitting an input to the context window
along the question graph."""
import pytest

from rasfast.llm import LocalLLM
from rasfast.llm import reader as R
from rasfast.types import RetrievedPassage

P = [RetrievedPassage(0, "Velora Studios", "Velora Studios was founded by Mira Okonkwo."),
     RetrievedPassage(1, "Mira Okonkwo", "Mira Okonkwo was born in Castrell.")]


@pytest.mark.parametrize("reply, question, answer", [
    ("Answer: Castrell.", "", "Castrell"),
    ("\n\n\"Aun\"\nbecause the river ...", "", "Aun"),
    ("**Final answer:** 1991", "", "1991"),
    ("So the answer is Mira Okonkwo.", "", "Mira Okonkwo"),
    ("Velora Studios | founded by | Mira Okonkwo", "Who founded Velora Studios?", "Mira Okonkwo"),
    ("(Velora Studios, founded by, Mira Okonkwo)", "Who founded Velora Studios?", "Mira Okonkwo"),
    ('("Velora Studios", "founded by", "Mira Okonkwo")', "Who founded Velora Studios?", "Mira Okonkwo"),
    ("<Mira Okonkwo; founded; Velora Studios>", "Who founded Velora Studios?", "Mira Okonkwo"),
    ("The Prestige (film)", "", "The Prestige (film)"),          # a title's parentheses stay
    ("Paris, France", "", "Paris, France"),                      # not a triple: two fields
    ("", "", ""), (None, "", ""),
])
def test_finalize_answer(reply, question, answer):
    assert R.finalize_answer(reply, question) == answer


def test_one_instruction_family_and_answer_shape_for_every_input_kind():
    kinds = {"none": R.ReaderInput("q?"), "passages": R.ReaderInput("q?", P),
             "facts": R.ReaderInput("q?", [], [("q?", [("a", "b", "c")])]),
             "both": R.ReaderInput("q?", P, [("q?", [("a", "b", "c")])]),
             "knowledge": R.ReaderInput("q?", knowledge="[1] Sub-question: x\nKnowledge: y")}
    for kind, inp in kinds.items():
        assert inp.kind() == kind
        text = "\n".join(m["content"] for m in R.messages(inp))
        assert R.ANSWER_SHAPE in text and text.count("Question: q?") == 1
        if kind != "none":
            assert "give your best guess" in text and inp.context_text() in text
    one = "\n".join(m["content"] for m in R.messages(kinds["passages"], "one-shot"))
    assert R.ONE_SHOT_QUESTION in one and "Wikipedia Title: Mira Okonkwo" in one and "at most 6 words" in one
    with pytest.raises(ValueError, match="passages only"):
        R.messages(kinds["facts"], "one-shot")
    with pytest.raises(ValueError, match="reader"):
        R.messages(kinds["passages"], "three-shot")


def test_facts_layout_is_per_sub_query_with_every_triple_once():
    blocks = [("Who founded Velora Studios?", [("Velora Studios", "founded by", "Mira Okonkwo")] * 2),
              ("Where was Mira Okonkwo born?", [("Velora Studios", "founded by", "Mira Okonkwo"),
                                                ("Mira Okonkwo", "born in", "Castrell")])]
    text = R.facts_text(blocks)
    assert text.index("Search 1: Who founded") < text.index("Velora Studios | founded by") < \
        text.index("Search 2: Where was") < text.index("Mira Okonkwo | born in | Castrell")
    assert text.count("Velora Studios | founded by | Mira Okonkwo") == 1


def test_question_graph_order_puts_the_question_entities_and_their_neighbourhood_first():
    trip = [("Lucy", "discovered by", "Donald Johanson"),          # unconnected
            ("Castrell", "located on", "Aun"),                      # 2 hops from the question
            ("Mira Okonkwo", "born in", "Castrell"),                # 1 hop
            ("Velora Studios", "founded by", "Mira Okonkwo")]       # names a question entity
    order = R.order_by_question_graph(trip, "Which river flows through the birthplace of the founder of Velora Studios?")
    assert order == [3, 2, 1, 0]
    # ties keep the input order; no question entity at all: input order
    assert R.order_by_question_graph(trip, "What is love?") == [0, 1, 2, 3]


class _Engine:
    n_ctx = 400

    def render(self, messages):
        return "\n".join(m["content"] for m in messages)

    def tokenize(self, text):
        return text.split()

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        text = " ".join(tokens)
        return ("Castrell" if "Castrell" in text else "unknown"), 1, 0


def test_fit_to_context_cuts_facts_far_from_the_question_first():
    llm = LocalLLM("stand-in", engine=_Engine(), n_ctx=400)
    near = [("Velora Studios", "founded by", "Mira Okonkwo"), ("Mira Okonkwo", "born in", "Castrell")]
    far = [(f"Thing {i}", "relates to", f"Other thing {i}") for i in range(80)]
    inp = R.ReaderInput("Where was the founder of Velora Studios born?", [], [("s1", far + near)])
    fitted = R.fit_to_context(inp, llm)
    assert 0 < fitted.cut < 80 and set(near) <= set(fitted.triples)
    assert R.count_tokens(llm, R.messages(fitted)) <= 400 - R.MAX_NEW_TOKENS
    got = R.read(llm, [inp])[0]
    assert got.answer == "Castrell" and got.shown.cut == fitted.cut and got.error is None
    small = R.ReaderInput("q?", P)
    assert R.fit_to_context(small, llm) is small                 # fits: unchanged


def test_read_isolates_a_failed_prompt():
    class Engine(_Engine):
        def complete(self, tokens, *a):
            if "poison" in " ".join(tokens):
                raise RuntimeError("boom")
            return "Aun", 1, 0
    llm = LocalLLM("stand-in", engine=Engine(), n_ctx=400)
    a, b = R.read(llm, [R.ReaderInput("poison?"), R.ReaderInput("river?")])
    assert a.answer is None and "boom" in a.error and isinstance(a.exception, RuntimeError)
    assert b.answer == "Aun" and b.error is None
