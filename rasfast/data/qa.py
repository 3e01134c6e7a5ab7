"""Loaders for the multi-hop QA data in ../shared/data (schemas: SOURCES.md there).

All loaders return a :class:`QADataset`: a passage corpus (corpus index == passage id),
questions with gold answers and gold passage ids into that corpus, and, for MuSiQue, the
GPT-3.5 OpenIE triples per passage. The data is read in place at run time; nothing is
copied into the repository. The root is ``$RASFAST_DATA`` if set, else the first
``shared/data`` found beside the current directory or beside the repository.
"""
from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

_REPO = pathlib.Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Passage:
    pid: int
    title: str
    text: str

    @property
    def content(self) -> str:
        """Title and text, as retrievers index them."""
        return f"{self.title}\n{self.text}"


@dataclass
class Question:
    qid: str
    question: str
    answer: str
    aliases: List[str] = field(default_factory=list)
    gold_pids: List[int] = field(default_factory=list)
    type: str = ""

    @property
    def answers(self) -> List[str]:
        return [self.answer, *self.aliases]


@dataclass
class QADataset:
    name: str
    passages: List[Passage]
    questions: List[Question]
    # raw OpenIE triples per passage (lists of strings, possibly malformed), or None
    triples: Optional[List[List[List[str]]]] = None

    def __repr__(self) -> str:
        t = sum(len(x) for x in self.triples) if self.triples is not None else None
        return (f"QADataset({self.name!r}, passages={len(self.passages)}, "
                f"questions={len(self.questions)}, triples={t})")


def data_root(root: Optional[os.PathLike] = None) -> pathlib.Path:
    """The shared data folder: ``root``, ``$RASFAST_DATA``, or ../shared/data nearby."""
    if root is not None:
        return pathlib.Path(root)
    env = os.environ.get("RASFAST_DATA")
    if env:
        return pathlib.Path(env)
    for cand in (pathlib.Path.cwd() / ".." / "shared" / "data",
                 pathlib.Path.cwd() / "shared" / "data",
                 _REPO.parent / "shared" / "data",
                 _REPO.parent.parent / "shared" / "data"):  # a git worktree one level deeper
        if cand.is_dir():
            return cand.resolve()
    raise FileNotFoundError("shared data not found: set RASFAST_DATA or pass the data root "
                            "(expected ../shared/data beside the repository)")


def _dataset_dir(root, name: str) -> pathlib.Path:
    """``root`` may be the data root or the dataset's own folder."""
    r = data_root(root)
    return r if (r / name).is_dir() is False and r.name == name else r / name


def load_musique(root=None, triples: bool = True) -> QADataset:
    """MuSiQue (HippoRAG subset): 100 questions, 1,890 passages, GPT-3.5 OpenIE triples.

    Gold passages match the corpus on the exact (title, text) pair (titles repeat).
    The OpenIE file holds bare ``NaN`` tokens, which Python's json reads.
    """
    d = _dataset_dir(root, "musique")
    corpus = json.loads((d / "musique_train_corpus.json").read_text())
    passages = [Passage(i, p["title"], p["text"]) for i, p in enumerate(corpus)]
    by_pair: Dict[Tuple[str, str], int] = {(p.title, p.text): p.pid for p in passages}
    questions = []
    for q in json.loads((d / "musique_train.json").read_text()):
        gold = []
        for para in q["paragraphs"]:
            if para.get("is_supporting"):
                pid = by_pair[(para["title"], para["paragraph_text"])]
                if pid not in gold:
                    gold.append(pid)
        questions.append(Question(q["id"], q["question"], q["answer"],
                                  list(q.get("answer_aliases") or []), gold,
                                  q["id"].split("__")[0]))
    trip = None
    if triples:
        f = d / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
        docs = json.loads(f.read_text())["docs"]
        if len(docs) != len(passages):
            raise ValueError(f"{f}: {len(docs)} docs for {len(passages)} passages")
        trip = [list(doc.get("extracted_triples") or []) for doc in docs]
    return QADataset("musique", passages, questions, trip)


def load_hotpotqa(root=None) -> QADataset:
    """HotpotQA (HippoRAG subset): 100 questions, 994 passages keyed by unique title."""
    d = _dataset_dir(root, "hotpotqa")
    corpus = json.loads((d / "hotpotqa_train_corpus.json").read_text())
    passages = [Passage(i, title, "".join(sents)) for i, (title, sents) in enumerate(corpus.items())]
    by_title = {p.title: p.pid for p in passages}
    questions = []
    for q in json.loads((d / "hotpotqa_train.json").read_text()):
        gold = []
        for title, _ in q["supporting_facts"]:
            pid = by_title[title]
            if pid not in gold:
                gold.append(pid)
        questions.append(Question(q["_id"], q["question"], q["answer"], [], gold, q.get("type", "")))
    return QADataset("hotpotqa", passages, questions)


def load_2wiki(root=None) -> QADataset:
    """2WikiMultihopQA (HippoRAG 1,000-question subset): 6,119 passages; gold ids index the corpus."""
    d = _dataset_dir(root, "2wikimultihopqa")
    corpus = json.loads((d / "2wikimultihopqa_corpus.json").read_text())
    passages = [Passage(i, p["title"], p["text"]) for i, p in enumerate(corpus)]
    labels = {e["id"]: e for e in json.loads((d / "evaluation_only.json").read_text())}
    questions = []
    for line in (d / "questions.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        lab = labels[q["id"]]
        gold = []
        for group in lab["gold_groups"]:
            for g in group:
                pid = int(g.split(":")[1])
                if pid not in gold:
                    gold.append(pid)
        questions.append(Question(q["id"], q["question"].strip(), lab["answers"][0],
                                  list(lab["answers"][1:]), gold, lab.get("type", "")))
    return QADataset("2wikimultihopqa", passages, questions)


_LOADERS = {"musique": load_musique, "hotpotqa": load_hotpotqa, "2wikimultihopqa": load_2wiki,
            "2wiki": load_2wiki}


def load_dataset(name: str, root=None) -> QADataset:
    """Loads 'musique', 'hotpotqa' or '2wikimultihopqa' (alias '2wiki') from the data root."""
    if name not in _LOADERS:
        raise ValueError(f"name: expected one of {', '.join(sorted(_LOADERS))}, got {name!r}")
    return _LOADERS[name](root)


def dataset_names() -> Sequence[str]:
    return ("musique", "hotpotqa", "2wikimultihopqa")
