"""Test helpers for the HTML reports: a tiny corpus whose texts hold markup (a passage with a
``<script>``, a title with tags, an entity that is an ``<img onerror>``), a scripted
stand-in LLM, real ``eval qa`` runs over them, and a strict well-formedness checker."""
from __future__ import annotations

from html.parser import HTMLParser

from rasfast.data.qa import Passage, QADataset, Question
from rasfast.llm import LocalLLM

SCRIPT = "<script>alert('passage')</script>"
EVIL_ENTITY = "<img src=x onerror=alert(1)>"
PASSAGES = [
    Passage(0, "Velora Studios", "Velora Studios is a game company founded by Mira Okonkwo."),
    Passage(1, "Mira Okonkwo", "Mira Okonkwo is a designer born in Castrell."),
    Passage(2, "Castrell", "Castrell is a port city on the river Aun."),
    Passage(3, "Port <b>Elden</b>", f"Port Elden hosts the Elden Fair every spring. {SCRIPT} & more."),
]
TRIPLES = [[["Velora Studios", "founded by", "Mira Okonkwo"]], [["Mira Okonkwo", "born in", "Castrell"]],
           [["Castrell", "located on", "Aun"]], [["Port Elden", "hosts", "Elden Fair"],
                                                 ["Port Elden", "<i>twinned</i> with", EVIL_ENTITY]]]
QUESTIONS = [Question("q1", "In which city was the founder of Velora Studios born?", "Castrell", [], [0, 1]),
             Question("q2", "Which river flows through the birthplace of Mira Okonkwo?", "Aun", ["river Aun"], [1, 2]),
             Question("q3", "What does Port Elden host?", "the Elden Fair", [], [3])]


class Engine:
    """Replies by role: the planner searches once then says ENOUGH; the readers answer from
    a lookup, except that the closed-book reader always says "Paris" (so dense and the
    retrieval systems differ from it)."""
    n_ctx = 8192

    def render(self, messages):
        return "\n".join(m["content"] for m in messages)

    def tokenize(self, text):
        return text.split()

    def complete(self, tokens, max_new_tokens, temperature, stop_check):
        text = " ".join(tokens)
        question = text.split("Question: ", 1)[-1].split("?", 1)[0]
        if "ENOUGH" in text:
            reply = "ENOUGH" if "Search 2" in text else "SEARCH: Where was Mira Okonkwo born?"
        elif "Document" not in text and "Facts" not in text and "Search" not in text:
            reply = "Paris"
        elif "Velora" in question:
            reply = "Answer: Castrell."
        elif "river" in question:
            reply = "the river Aun"
        else:
            reply = f"Elden Fair {SCRIPT}"   # a reply with markup: the page must show it as text
        return reply, len(reply.split()), 0


def dataset(name: str = "tiny") -> QADataset:
    return QADataset(name, PASSAGES, QUESTIONS, TRIPLES)


def llm() -> LocalLLM:
    return LocalLLM("stand-in", engine=Engine())


def run_eval(tmp_path, systems=("none", "dense", "ras", "gear-naive")):
    """A real ``eval qa`` run (hashing encoder, stand-in LLM): its output and records."""
    from rasfast.qa_eval import evaluate_qa
    return evaluate_qa(dataset(), list(systems), llm(), "stand-in", encoder="hashing",
                       cache_dir=tmp_path / "cache", progress=False, log=lambda m: None)


# hand-made schema-2 records: dense right on q1 and q3, "ras+passages" (a name that needs
# escaping in ids and classes) right on q2 and q3
def hand(qid, answer, gold, em, **kw):
    return {"qid": qid, "schema": 2, "question": f"question {qid}?", "answer": answer, "gold": [gold], "em": em,
            "f1": em, "acc": em, "passages": [0, 1], "answer_retrieved": True, "answer_shown": True,
            "steps": [{"query": f"question {qid}?", "passages": [[0, 0.9], [1, 0.5]],
                       "triples": [["Velora Studios", "founded by", "Mira Okonkwo"]]}],
            "shown": {"passages": [0], "triples": [], "n_passages": 1, "n_triples": 0, "chars": 50, "cut": 0},
            "calls": [{"role": "reader", "prompt": "p", "reply": answer}], "timings": {"retrieve": 1.5}, **kw}


def summary(records):
    """What eval qa returns besides the records, for ``records``."""
    from rasfast.qa_eval.tables import paired_against, summarise
    return {"dataset": "tiny", "n": 3, "k": 5, "rows": [summarise(n, r, 5) for n, r in records.items()],
            "paired": paired_against(records)}


HAND = {"dense": [hand("q1", "Castrell", "Castrell", 1.0), hand("q2", "Nile", "Aun", 0.0),
                  hand("q3", "the Elden Fair", "the Elden Fair", 1.0)],
        "ras+passages": [hand("q1", "Paris", "Castrell", 0.0), hand("q2", "Aun", "Aun", 1.0),
                         hand("q3", "the Elden Fair", "the Elden Fair", 1.0)]}


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictChecker(HTMLParser):
    """Well-formedness beyond what browsers forgive: every element closed, in order (void
    elements excepted; SVG's self-closing ones are fine), ids unique, every ``#fragment``
    link pointing at an id of the page; collects start tags and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.links, self.tags, self.text = [], [], set(), [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if "id" in a:
            if a["id"] in self.ids:
                self.errors.append(f"duplicate id {a['id']!r}")
            self.ids.add(a["id"])
        if tag == "a" and (a.get("href") or "").startswith("#"):
            self.links.append(a["href"][1:])
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> at {self.getpos()} closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    def check(self, html: str) -> "StrictChecker":
        self.feed(html)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed at the end: {self.stack[-5:]}")
        self.errors += [f"link to a missing id #{x}" for x in self.links if x not in self.ids]
        return self
