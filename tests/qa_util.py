"""A tiny QA dataset and a scripted stand-in LocalLLM engine for rasfast eval qa tests (also
run by tests/qa_eval_worker.py in a subprocess)."""
from rasfast.data.qa import Passage, QADataset, Question
from rasfast.llm import LocalLLM
from rasfast.llm.reader import ANSWER_SHAPE, YES_NO_SHAPE

PASSAGES = [
    Passage(0, "Velora Studios", "Velora Studios is a game company founded by Mira Okonkwo."),
    Passage(1, "Mira Okonkwo", "Mira Okonkwo is a designer born in Castrell."),
    Passage(2, "Castrell", "Castrell is a port city on the river Aun."),
    Passage(3, "Port Elden", "Port Elden hosts the Elden Fair every spring."),
]
TRIPLES = [[["Velora Studios", "founded by", "Mira Okonkwo"]], [["Mira Okonkwo", "born in", "Castrell"]],
           [["Castrell", "located on", "Aun"]], [["Port Elden", "hosts", "Elden Fair"]]]
QUESTIONS = [Question("q1", "In which city was the founder of Velora Studios born?", "Castrell", [], [0, 1]),
             Question("q2", "Which river flows through the birthplace of Mira Okonkwo?", "Aun", ["river Aun"], [1, 2]),
             Question("q3", "What does Port Elden host?", "the Elden Fair", [], [3])]


class Engine:
    """Replies by role: the RAS planner searches once then says ENOUGH (or garbles when told
    to); the reader answers from a lookup; anything else gets a short fixed reply."""
    n_ctx = 4096

    def __init__(self, garble_planner=False, interrupt_after=None, delay=0.0, wrong=()):
        self.garble_planner, self.interrupt_after, self.calls = garble_planner, interrupt_after, 0
        self.delay, self.wrong = delay, set(wrong)

    def render(self, messages):
        return "\n".join(m["content"] for m in messages)

    def tokenize(self, text):
        return text.split()

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        if self.delay:
            import time
            time.sleep(self.delay)
        text = " ".join(tokens)
        question = text.rsplit("Question: ", 1)[-1].split("?", 1)[0]
        if "ENOUGH" in text:   # the compact planner's task
            reply = "I think we should look further" if self.garble_planner else (
                "ENOUGH" if "Search 2" in text else "SEARCH: Where was Mira Okonkwo born?")
        elif (" ".join(ANSWER_SHAPE.split()[:6]) not in text and YES_NO_SHAPE[:40] not in text
              and "at most 6 words" not in text):
            reply = "none"   # not a reader prompt (contract or one-shot)
        elif any(w in question for w in self.wrong):
            reply = "Oslo"
        elif "Velora" in question:
            reply = "Answer: Castrell."
        elif "river" in question:
            reply = "the river Aun"
        else:
            reply = "Elden Fair"
        return reply, len(reply.split()), 0


def dataset(n=None, name="tiny"):
    qs = QUESTIONS
    if n is not None:   # more questions: the three, again, under new ids
        qs = [Question(f"{q.qid}-{i}", q.question, q.answer, q.aliases, q.gold_pids)
              for i in range(n // 3 + 1) for q in QUESTIONS][:n]
    return QADataset(name, PASSAGES, qs, TRIPLES)


def llm(**kw):
    return LocalLLM("stand-in", engine=Engine(**kw))
