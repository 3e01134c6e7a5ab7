"""The GraphLLM's training data, built as RAS builds HotpotQA-SUBQ (paper, Appendix B,
Algorithm 1), from the data this machine has.

A *chain* is one question solved step by step: the question, its sub-queries (the first is
the question itself: the RAS loop's first retrieval uses it, paper section 4.1), the document
each step retrieves, the triples of that document, and the answer. Each chain gives, through
:func:`rasfast.llm.training_data.multitask_samples`, one planner sample per step (target
``[SUBQ] <next sub-query>``, and ``[SUFFICIENT]`` after the last step) and one answer sample.
The graph of a step's sample is the list of the triples of the documents retrieved so far
(one subgraph per step, oldest first): what the loop's GraphLLM reads.

Triples come from the extractor the RAS loop itself uses on that corpus
(:class:`rasfast.systems.ras.extractors.CachedTripleExtractor` as ``build_ras`` and
``eval qa`` wire it): MuSiQue's shipped GPT-3.5 OpenIE triples, the generated world's gold
triples, and the model-free sentence-pattern extractor for HotpotQA (which ships none).

Sources:

- **MuSiQue** (questions 1-50 for training): ``question_decomposition`` gives each hop's
  sub-question (``#k`` replaced by hop k's answer) and its supporting paragraph.
- **HotpotQA** (questions 1-50): the supporting facts give the documents; the document whose
  title the question names goes first. HotpotQA has no sub-questions and the paper wrote
  them with Claude; offline, the sub-query for a later document is the question scoped to
  that document's title (``"<title>: <question>"``), a model-free stand-in.
- **The generated world** (:func:`rasfast.data.demo.generate_world`): thousands of 2- and
  3-hop questions with gold chains; each template's later hops have a sub-question naming
  the bridge entity (``"In which country is Velford located?"``). The held-out part comes
  from other seeds, and keeps only questions none of whose chain entities occur in a
  training world.

``[NO_RETRIEVAL]`` (Algorithm 1, lines 3-7): the base LLM answers every question directly;
a question it answers exactly gets a ``[NO_RETRIEVAL]`` planner sample and a no-context
answer sample instead of its chain. The world's entities are fictional, so its questions
never qualify, and by default they are not sent to the check (``graphllm data
--no-retrieval-sources``; checking 3,000 of them costs about 20 minutes on 2 busy cores). To
give the label some support, simple arithmetic questions are offered to the same check
(only those the base model gets right are kept).
"""
from __future__ import annotations

import json
import os
import random
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ...llm.training_data import GraphLLMSample, multitask_samples

Triple = Tuple[str, str, str]
_HOP_REF = re.compile(r"#(\d+)")


@dataclass
class Chain:
    """One solved question (see the module docstring)."""
    source: str
    qid: str
    question: str
    answer: str
    subqueries: List[str]
    step_pids: List[int]
    step_triples: List[List[Triple]]
    split: str = "train"
    no_retrieval: bool = False


@dataclass
class Extraction:
    """A corpus's triples as the loop gets them, and the extractor's name."""
    name: str
    extractor: Any

    def triples(self, pid: int, passages) -> List[Triple]:
        from ...types import RetrievedPassage
        p = passages[pid]
        return [tuple(t) for t in self.extractor.extract([RetrievedPassage(p.pid, p.title, p.text)])[0]]


def loop_extraction(ds) -> Extraction:
    """The extractor the RAS loop uses on ``ds``: the dataset's own triples when it ships
    them, else the default model-free one (``eval qa``'s choice for HotpotQA)."""
    from .extractors import CachedTripleExtractor, SentenceTripleExtractor
    if ds.triples is not None:
        name = {"musique": "MuSiQue OpenIE (GPT-3.5, shipped)", "demo": "generated world gold triples"}.get(
            ds.name, f"{ds.name} shipped triples")
        return Extraction(name, CachedTripleExtractor.from_dataset(ds))
    return Extraction("sentence-patterns (rasfast.SentenceTripleExtractor)",
                      CachedTripleExtractor.from_dataset(ds, fallback=SentenceTripleExtractor()))


def _span(questions: Sequence, first: int, last: int) -> List[Tuple[int, Any]]:
    """(1-based number, item) for items ``first``..``last`` (inclusive)."""
    if first < 1 or last < first:
        raise ValueError(f"questions: expected a range A-B with 1 <= A <= B, got {first}-{last}")
    return [(i + 1, q) for i, q in enumerate(questions) if first <= i + 1 <= last]


# -- MuSiQue ------------------------------------------------------------------------------------
def musique_chains(first: int = 1, last: int = 50, root=None, split: str = "train") -> Tuple[List[Chain], str]:
    """Chains of MuSiQue questions ``first``..``last`` (1-based) and the extractor's name."""
    from ...data.qa import _dataset_dir, load_dataset
    ds = load_dataset("musique", root)
    raw = json.loads((_dataset_dir(root, "musique") / "musique_train.json").read_text())
    ext = loop_extraction(ds)
    by_pair = {(p.title, p.text): p.pid for p in ds.passages}
    out = []
    for n, q in _span(raw, first, last):
        paras = {p["idx"]: by_pair[(p["title"], p["paragraph_text"])] for p in q["paragraphs"]}
        answers: List[str] = []
        subs, pids = [], []
        for k, hop in enumerate(q["question_decomposition"]):
            subq = _HOP_REF.sub(lambda m: answers[int(m.group(1)) - 1]
                                if 0 < int(m.group(1)) <= len(answers) else m.group(0), hop["question"])
            answers.append(hop["answer"])
            subs.append(q["question"] if k == 0 else subq)
            pids.append(paras[hop["paragraph_support_idx"]])
        out.append(Chain("musique", q["id"], q["question"], q["answer"], subs, pids,
                         [ext.triples(p, ds.passages) for p in pids], split))
    return out, ext.name


# -- HotpotQA -----------------------------------------------------------------------------------
def _norm(s: str) -> str:
    from ...metrics import normalize_answer
    return normalize_answer(s)


def hotpot_subquery(title: str, question: str) -> str:
    """The model-free stand-in for the paper's generated sub-query of a later document."""
    return f"{title}: {question.strip()}"


def hotpotqa_chains(first: int = 1, last: int = 50, root=None, split: str = "train") -> Tuple[List[Chain], str]:
    """Chains of HotpotQA questions ``first``..``last``: the supporting documents, the one
    whose title the question names first (then in supporting-fact order)."""
    from ...data.qa import _dataset_dir, load_dataset
    ds = load_dataset("hotpotqa", root)
    raw = json.loads((_dataset_dir(root, "hotpotqa") / "hotpotqa_train.json").read_text())
    ext = loop_extraction(ds)
    by_title = {p.title: p.pid for p in ds.passages}
    out = []
    for n, q in _span(raw, first, last):
        titles = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))
        nq = _norm(q["question"])
        named = lambda t: _norm(re.sub(r"\s*\(.*?\)\s*$", "", t)) in nq  # noqa: E731
        titles.sort(key=lambda t: not named(t))   # stable: the named document first
        pids = [by_title[t] for t in titles]
        subs = [q["question"]] + [hotpot_subquery(re.sub(r"\s*\(.*?\)\s*$", "", t), q["question"])
                                  for t in titles[1:]]
        out.append(Chain("hotpotqa", q["_id"], q["question"], q["answer"], subs, pids,
                         [ext.triples(p, ds.passages) for p in pids], split))
    return out, ext.name


# -- the generated world ------------------------------------------------------------------------
# the sub-questions of hops 2.. of each template; {e} = the title of that hop's gold passage
WORLD_HOP_QUESTIONS: Dict[str, List[str]] = {
    "country_of_birth": ["In which country is {e} located?"],
    "founder_of_employer": ["Who founded {e}?"],
    "hq_city_of_employer": ["In which city is {e} headquartered?"],
    "university_founding_year": ["In what year was {e} founded?"],
    "mayor_of_birthplace": ["Who is the mayor of {e}?"],
    "spouse_occupation": ["What is the occupation of {e}?"],
    "spouse_birth_year": ["In what year was {e} born?"],
    "hq_country_of_employer": ["In which city is {e} headquartered?", "In which country is {e} located?"],
    "currency_of_birth_country": ["In which country is {e} located?", "What is the currency of {e}?"],
    "spouse_birth_country": ["In which city was {e} born?", "In which country is {e} located?"],
}


def world_chains(ds, split: str = "train", exclude_entities: Optional[set] = None,
                 limit: Optional[int] = None, seed: Optional[int] = None) -> List[Chain]:
    """Chains of a generated world's questions (gold passages in chain order). With
    ``exclude_entities``, a question is dropped when a passage title on its chain or its
    answer is one of them (the held-out part's "other entities")."""
    ext = loop_extraction(ds)
    out = []
    for q in ds.questions:
        tpl = q.type.split(":", 1)[1]
        hops = WORLD_HOP_QUESTIONS.get(tpl)
        if hops is None or len(hops) != len(q.gold_pids) - 1:
            raise ValueError(f"generated world: no sub-questions for template {tpl!r}")
        titles = [ds.passages[p].title for p in q.gold_pids]
        if exclude_entities and (any(t in exclude_entities for t in titles) or q.answer in exclude_entities):
            continue
        subs = [q.question] + [h.format(e=t) for h, t in zip(hops, titles[1:])]
        out.append(Chain("world", f"world-s{seed}-{q.qid}" if seed is not None else q.qid, q.question, q.answer, subs,
                         list(q.gold_pids), [ext.triples(p, ds.passages) for p in q.gold_pids], split))
        if limit is not None and len(out) >= limit:
            break
    return out


def world_sources(train_seeds: Sequence[int] = (1, 2, 3), questions_per_world: int = 1000,
                  heldout_seeds: Sequence[int] = (1001,), heldout_questions: int = 400,
                  passages: int = 2000) -> Tuple[List[Chain], List[Chain]]:
    """Training chains from the worlds of ``train_seeds`` and held-out chains (at most
    ``heldout_questions``) from ``heldout_seeds``' worlds, minus any question touching an
    entity (passage title) of a training world."""
    from ...data.demo import generate_world
    train, seen = [], set()
    for s in train_seeds:
        ds = generate_world(seed=s, n_passages=passages, n_questions=questions_per_world)
        seen.update(p.title for p in ds.passages)
        train += world_chains(ds, "train", seed=s)
    held: List[Chain] = []
    for s in heldout_seeds:
        if s in train_seeds:
            raise ValueError(f"heldout seeds: {s} is also a training seed")
        if len(held) >= heldout_questions:
            break
        # ask for more than needed: some questions touch a training entity and are dropped
        ds = generate_world(seed=s, n_passages=passages, n_questions=min(2 * heldout_questions, 4000))
        held += world_chains(ds, "heldout", exclude_entities=seen, limit=heldout_questions - len(held), seed=s)
    return train, held


# -- [NO_RETRIEVAL] -----------------------------------------------------------------------------
def arithmetic_questions(n: int = 150, seed: int = 0) -> List[Tuple[str, str]]:
    """Simple sums and differences, (question, answer): candidates for [NO_RETRIEVAL]."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        op = rng.choice(["plus", "minus", "times"])
        if (a, b, op) in seen or (op == "minus" and b > a):
            continue
        seen.add((a, b, op))
        val = a + b if op == "plus" else a - b if op == "minus" else a * b
        out.append((f"What is {a} {op} {b}?", str(val)))
    return out


DIRECT_SYSTEM = "Answer the question with the answer only: an entity, a date, a number or a few words."


def direct_answers(llm, questions: Sequence[str], batch_size: int = 32, max_new_tokens: int = 12,
                   progress: bool = False) -> List[str]:
    """The base LLM's direct answers (no retrieval), greedy, one per question
    (``llm``: a rasfast.llm backend, e.g. ``HFCausalLM`` over the base model)."""
    out: List[str] = []
    it = range(0, len(questions), batch_size)
    if progress:
        import sys
        from tqdm import tqdm
        it = tqdm(it, desc="direct answers", unit="batch", file=sys.stderr)
    for s in it:
        prompts = [[{"role": "system", "content": DIRECT_SYSTEM}, {"role": "user", "content": q}]
                   for q in questions[s:s + batch_size]]
        out += [r.strip().splitlines()[0].strip() if r.strip() else "" for r in
                llm.generate(prompts, max_new_tokens=max_new_tokens, stop=["\n"])]
    return out


def contains_words(reply: str, gold: str) -> bool:
    """The normalised ``gold`` occurs in the normalised ``reply`` as a run of whole words."""
    r, g = _norm(reply).split(), _norm(gold).split()
    return bool(g) and any(r[i:i + len(g)] == g for i in range(len(r) - len(g) + 1))


def apply_no_retrieval(chains: List[Chain], extra: Sequence[Tuple[str, str]], answer_fn: Optional[Callable],
                       progress: bool = False, sources: Optional[Sequence[str]] = None,
                       match: str = "words") -> Tuple[List[Chain], Dict[str, Any]]:
    """Algorithm 1, lines 3-7: a question the base model answers correctly becomes a
    [NO_RETRIEVAL] chain (no sub-queries). ``match``: ``"em"`` (the paper's A^ = A, exact
    match after normalisation) or ``"words"`` (the normalised gold occurs as whole words in
    the normalised reply: small instruct models answer in sentences, "The capital of France
    is Paris."; "13 minus 10 is 13" does not match "3"). ``extra`` (question, answer) candidates are
    offered to the same check. ``answer_fn(questions) -> answers``; None skips the check
    (no [NO_RETRIEVAL] samples). ``sources``: only chains of these sources are checked
    (None: all). Returns the chains and a summary."""
    from ...metrics import exact_match
    if answer_fn is None:
        return chains, {"checked": 0, "no_retrieval": 0, "note": "no base model check: no [NO_RETRIEVAL] samples"}
    idx = [i for i, c in enumerate(chains) if sources is None or c.source in sources]
    cands = [(chains[i].question, chains[i].answer) for i in idx] + list(extra)
    got = answer_fn([q for q, _ in cands]) if cands else []
    if match not in ("em", "words"):
        raise ValueError(f"match: expected 'em' or 'words', got {match!r}")
    hit = [bool(exact_match(g, [a])) if match == "em" else contains_words(g, a) for g, (_, a) in zip(got, cands)]
    out = list(chains)
    for i, h in zip(idx, hit[:len(idx)]):
        if h:
            c = chains[i]
            out[i] = Chain(c.source, c.qid, c.question, c.answer, [], [], [], c.split, True)
    for k, ((q, a), h) in enumerate(zip(extra, hit[len(idx):])):
        if h:
            out.append(Chain("arithmetic", f"arith-{k:04d}", q, a, [], [], [], "train", True))
    by_src: Dict[str, int] = {}
    for c in out:
        if c.no_retrieval:
            by_src[c.source] = by_src.get(c.source, 0) + 1
    skipped = sorted({c.source for c in chains} - set(sources)) if sources is not None else []
    return out, {"checked": len(cands), "no_retrieval": sum(by_src.values()), "by_source": by_src, "match": match,
                 "arithmetic_offered": len(extra), "sources_not_checked": skipped}


# -- samples and their statistics ---------------------------------------------------------------
def chain_samples(c: Chain) -> List[GraphLLMSample]:
    """The multitask samples of one chain; each sample's graph is the list of the step
    triples so far (JSON-serialisable; the trainer builds question graphs from it)."""
    if c.no_retrieval:
        return multitask_samples(c.question, [], [], c.answer)
    graphs = [[list(map(list, t)) for t in c.step_triples[:i + 1]] for i in range(len(c.subqueries))]
    return multitask_samples(c.question, c.subqueries, c.step_triples, c.answer, graphs)


def write_jsonl(chains: Iterable[Chain], path: str) -> int:
    """Writes every chain's samples, one JSON object a line: the sample's fields (task,
    question, context, graph, target; what ``load_samples_jsonl`` reads) plus ``source``,
    ``qid``, ``split`` and ``step``. Returns the number of samples."""
    n = 0
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for c in chains:
            for step, s in enumerate(chain_samples(c)):
                d = {"task": s.task, "question": s.question, "context": s.context, "graph": s.graph,
                     "target": s.target, "source": c.source, "qid": c.qid, "split": c.split, "step": step}
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
                n += 1
    os.replace(tmp, path)
    return n


def _summary(vals: Sequence[float], kind: str) -> Optional[Tuple]:
    if not vals:
        return None
    if kind == "mmm":   # mean, median, max
        return (round(statistics.fmean(vals), 1), statistics.median(vals), max(vals))
    return (min(vals), round(statistics.fmean(vals), 1), max(vals))   # min, mean, max


def sample_statistics(samples: Sequence[GraphLLMSample], count_tokens: Callable[[str], int],
                      instructions: Optional[Dict[str, str]] = None, cues: Optional[Dict[str, str]] = None
                      ) -> Dict[str, Dict[str, Any]]:
    """The paper's Table 3/4 rows per task (planner, answerer): queries; input and output
    tokens (mean, median, max; input = BOS + instruction + graph token + context + question +
    cue as the GraphLLM lays it out, untruncated); sub-queries in the input (min, mean, max);
    label counts; [SUBQ] tokens (min, mean, max); nodes and edges of the sample's graph
    (mean, median, max; entities of the union of its subgraphs' triples, two directed edges
    per triple as RAS builds question graphs)."""
    from ...llm.prompts import GRAPH_CUES, GRAPH_INSTRUCTIONS
    ins, cue = instructions or GRAPH_INSTRUCTIONS, cues or GRAPH_CUES
    fixed = {t: count_tokens(ins[t] + "\n") + count_tokens(f"\nQuestion: \n{cue[t]}") + 2 for t in ins}
    out = {}
    for task, label in (("plan", "planner"), ("answer", "answerer")):
        ss = [s for s in samples if s.task == task]
        inp, outp, nsub, subq, nodes, edges = [], [], [], [], [], []
        labels = {"[SUFFICIENT]": 0, "[SUBQ]": 0, "[NO_RETRIEVAL]": 0}
        for s in ss:
            inp.append(fixed[task] + count_tokens(s.question) + sum(count_tokens("\n" + c) for c in s.context))
            outp.append(count_tokens(" " + (s.target or "")))
            nsub.append(len(s.context))
            if task == "plan":
                for k in labels:
                    if (s.target or "").startswith(k):
                        labels[k] += 1
                if (s.target or "").startswith("[SUBQ]"):
                    subq.append(count_tokens(" " + s.target[len("[SUBQ]"):].strip()))
            trip = {tuple(t) for sg in (s.graph or []) for t in sg}
            ents = {x for t in trip for x in (t[0], t[2])}
            nodes.append(len(ents))
            edges.append(2 * len(trip))
        row = {"queries": len(ss), "input_tokens": _summary(inp, "mmm"), "output_tokens": _summary(outp, "mmm"),
               "subqueries": _summary(nsub, "min"), "nodes": _summary(nodes, "mmm"), "edges": _summary(edges, "mmm")}
        if task == "plan":
            row.update({"sufficient": labels["[SUFFICIENT]"], "subq": labels["[SUBQ]"],
                        "no_retrieval": labels["[NO_RETRIEVAL]"], "subq_tokens": _summary(subq, "min")})
        out[label] = row
    return out


def format_statistics(stats: Dict[str, Dict[str, Any]], title: str = "") -> str:
    """A Markdown table in the layout of the paper's dataset statistics table."""
    p, a = stats["planner"], stats["answerer"]
    f = lambda v: "-" if v is None else (f"({', '.join(format(x, ',') if isinstance(x, int) else str(x) for x in v)})"  # noqa: E731
                                        if isinstance(v, tuple) else format(v, ",") if isinstance(v, int) else str(v))
    rows = [("# Queries", "", p["queries"], a["queries"]),
            ("# Input Tokens", "(Mean, Median, Max)", p["input_tokens"], a["input_tokens"]),
            ("# Output Tokens", "(Mean, Median, Max)", p["output_tokens"], a["output_tokens"]),
            ("# Subqueries", "(Min, Mean, Max)", p["subqueries"], a["subqueries"]),
            ("# [SUFFICIENT]", "", p["sufficient"], None),
            ("# [SUBQ]", "", p["subq"], None),
            ("# [NO_RETRIEVAL]", "", p["no_retrieval"], None),
            ("# [SUBQ] Tokens", "(Min, Mean, Max)", p["subq_tokens"], None),
            ("# Nodes", "(Mean, Median, Max)", p["nodes"], a["nodes"]),
            ("# Edges", "(Mean, Median, Max)", p["edges"], a["edges"])]
    lines = ([f"{title}", ""] if title else []) + ["| | | Planner Data | Answerer Data |", "|---|---|---:|---:|"]
    lines += [f"| {n} | {k} | {f(x)} | {f(y)} |" for n, k, x, y in rows]
    return "\n".join(lines)


def samples_of(chains: Sequence[Chain]) -> List[GraphLLMSample]:
    return [s for c in chains for s in chain_samples(c)]


def token_counter(tokenizer=None) -> Tuple[Callable[[str], int], str]:
    """(count(text), unit name): the tokenizer's tokens, else whitespace-separated words."""
    if tokenizer is None:
        return (lambda t: len(t.split())), "words"
    return (lambda t: len(tokenizer(t, add_special_tokens=False)["input_ids"])), "tokens"


__all__ = ["Chain", "loop_extraction", "musique_chains", "hotpotqa_chains", "world_chains", "world_sources",
           "WORLD_HOP_QUESTIONS", "arithmetic_questions", "direct_answers", "apply_no_retrieval",
           "chain_samples", "write_jsonl", "sample_statistics", "format_statistics", "samples_of",
           "token_counter", "hotpot_subquery", "contains_words"]
