"""The reader contract keeps yes/no answers (issue 40 C): its answer-shape rule asked only for
"the entity or value the question asks for", and the 1.5B reader answered comparison
questions such as "Are X and Y both located in the same country?" with an entity ("Iran",
"Austria"), losing every yes/no question. A first fix named both shapes in one rule, and the
reader then answered "yes" to "Which actress ...?" (HotpotQA 51), so the rule is now chosen per
question. Hand-made comparison questions (MuSiQue has none, HotpotQA 51-100 only 5): each
question's rule in every prompt, the yes/no question test, the reply's post-processing, a read
end to end, and HotpotQA's yes/no F1 rule."""
import pytest

from rasfast.llm import reader as R
from rasfast.metrics import answer_scores, token_f1
from rasfast.types import RetrievedPassage

COMPARISON = [   # (question, gold): hand-made, shaped like HotpotQA's comparison questions
    ("Are Velora Studios and Harrow Films both located in the same country?", "no"),
    ("Are Mira Okonkwo and Tomas Brandt both American writers?", "yes"),
    ("Were the Aun River and the Belt Canal both built before 1900?", "yes"),
    ("Is Lake Orrin deeper than Lake Vessa?", "no"),
    ("Did Orrin Vale direct The Salt Harbour?", "yes"),
    ("Do the Harbour Trilogy and Salt Roads share a publisher?", "no"),
    ("Was Karel Dusek a bishop of Brno?", "yes"),
    ("Has the Brno Cathedral ever been rebuilt?", "no"),
]
NOT_YES_NO = [
    "Which is older, Velora Studios or Harrow Films?",
    "Is Mira Okonkwo or Tomas Brandt the older writer?",          # asks for one of the two
    "Who directed The Salt Harbour?",
    "When did the director of the film The Salt Harbour die?",
    "What country are Velora Studios and Harrow Films located in?",
    "In which city was Karel Dusek bishop?",
]


def _inputs(question):
    return [R.ReaderInput(question), R.ReaderInput(question, [RetrievedPassage(1, "Velora Studios", "Velora Studios is in Lagos.")]),
            R.ReaderInput(question, [], [("", [("Velora Studios", "located in", "Nigeria")])]),
            R.ReaderInput(question, knowledge="Velora Studios: Nigeria")]


def test_a_comparison_question_is_asked_for_yes_or_no_and_only_that():
    assert "yes or no" in R.YES_NO_SHAPE.lower() and "yes or no" not in R.ANSWER_SHAPE.lower()
    assert "entity or value the question asks for" in R.ANSWER_SHAPE
    for q, _ in COMPARISON:
        assert R.answer_shape(q) == R.YES_NO_SHAPE
        for inp in _inputs(q):
            text = "\n".join(m["content"] for m in R.messages(inp))
            assert R.YES_NO_SHAPE in text and R.ANSWER_SHAPE not in text and inp.question in text


def test_a_question_asking_for_an_entity_never_reads_yes_or_no():
    # one rule naming both shapes made the 1.5B reader answer "yes" to "Which actress ...?"
    for q in NOT_YES_NO:
        assert R.answer_shape(q) == R.ANSWER_SHAPE
        for inp in _inputs(q):
            text = "\n".join(m["content"] for m in R.messages(inp))
            assert R.ANSWER_SHAPE in text and "yes or no" not in text.lower()


@pytest.mark.parametrize("question", [q for q, _ in COMPARISON])
def test_comparison_questions_are_yes_no_questions(question):
    assert R.is_yes_no_question(question)


@pytest.mark.parametrize("question", NOT_YES_NO)
def test_questions_asking_for_an_entity_are_not(question):
    assert not R.is_yes_no_question(question)


@pytest.mark.parametrize("reply,answer", [
    ("Yes", "yes"), ("No", "no"), ("yes.", "yes"), ("No.", "no"),
    ("Yes, both are American writers.", "yes"), ("No, Velora Studios is in Nigeria.", "no"),
    ("Answer: Yes", "yes"), ("**Answer:** No.", "no"), ("The answer is yes.", "yes"),
    ("Nigeria", "Nigeria"),                    # an entity stays what it is: EM/F1 then score it 0
    ("No Doubt", "No Doubt"),                  # a name that opens with "No" is not a "no"
])
def test_a_reply_to_a_yes_no_question_is_reduced_to_yes_or_no(reply, answer):
    assert R.finalize_answer(reply, COMPARISON[0][0]) == answer


def test_replies_to_other_questions_keep_their_words():
    assert R.finalize_answer("No Doubt.", "Which band recorded Tragic Kingdom?") == "No Doubt"
    assert R.finalize_answer("Yes, Minister", "Which sitcom did Paul Eddington star in?") == "Yes, Minister"
    assert R.finalize_answer("Yes, Minister", "") == "Yes, Minister"


class _Scripted:
    """An LLM backend that replies like the 1.5B reader: a sentence starting with yes/no when
    the prompt asks for yes or no, else the entity."""

    def __init__(self):
        self.prompts = []

    def generate(self, prompts, max_new_tokens=32, stop=None, temperature=0.0):
        out = []
        for p in prompts:
            text = "\n".join(m["content"] for m in p)
            self.prompts.append(text)
            q = text.rsplit("Question:", 1)[-1]
            out.append(("Yes, both of them are." if "Mira" in q else "No, they are not.")
                       if "yes or no" in text else "Nigeria")
        return out


def test_a_read_of_comparison_questions_answers_yes_or_no_and_scores_under_the_hotpotqa_rule():
    llm = _Scripted()
    got = R.read(llm, [R.ReaderInput(q, [RetrievedPassage(1, "Velora Studios", "Velora Studios is in Lagos.")])
                       for q, _ in COMPARISON[:2]])
    assert [g.answer for g in got] == ["no", "yes"]
    assert all(R.YES_NO_SHAPE in p and R.ANSWER_SHAPE not in p for p in llm.prompts)
    for g, (_, gold) in zip(got, COMPARISON[:2]):
        assert answer_scores(g.answer, [gold], yes_no=True) == {"acc": 1.0, "f1": 1.0, "em": 1.0}


def test_hotpotqa_yes_no_f1_rule():
    # an entity for a yes/no gold, or the other polarity, scores 0 (the official script's rule)
    assert token_f1("Iran", ["no"], yes_no=True) == 0.0
    assert token_f1("no", ["yes"], yes_no=True) == 0.0
    assert token_f1("yes they are", ["yes"], yes_no=True) == 0.0
    assert token_f1("yes they are", ["yes"], yes_no=False) == pytest.approx(0.5)
    assert token_f1("yes", ["yes"], yes_no=True) == 1.0
    assert token_f1("no", ["Nigeria"], yes_no=True) == 0.0
    assert token_f1("Lagos, Nigeria", ["Nigeria"], yes_no=True) == pytest.approx(2 / 3)
