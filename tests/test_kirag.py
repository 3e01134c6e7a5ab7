"""rasfast.systems.kirag: the batched loop (stages, one call per stage per round, ranking by the
segment ops), the heuristic and LLM constructors (scripted local HTTP server, malformed
replies), aligner training on a tiny bi-encoder built here, silver chains on MuSiQue."""
import numpy as np
import pytest
import torch  # noqa: F401  (tiny_bi_encoder seeds torch)

from fake_openai_server import FakeServer
from llm_util import torch_threads
from rasfast.data.qa import Passage
from rasfast.encode import HashingEncoder
from rasfast.systems.kirag import (AlignerPair, ConstructorInput, HeuristicConstructor, KiRAG,
                           LLMConstructor, TripleStore, from_components, heuristic_decision,
                           load_aligner, save_aligner, train_aligner)
from rasfast.systems.kirag.prompts import parse_constructor
from rasfast.llm.openai_chat import OpenAIChat
from rasfast.systems.ras.retrievers import DenseRetriever

PASSAGES = [Passage(0, "Alice", "Alice was born in Paris."),
            Passage(1, "Paris", "Paris is the capital of France."),
            Passage(2, "Bob", "Bob likes cheese. Cheese is made of milk."),
            Passage(3, "France", "France uses the euro."),
            Passage(4, "Empty", "A passage without triples.")]
TRIPLES = {0: [["Alice", "born in", "Paris"]],
           1: [["Paris", "capital of", "France"], ["Paris", "located on", "Seine"]],
           2: [["Bob", "likes", "cheese"], ["cheese", "made of", "milk"], ["bad"]],
           3: [["France", "currency", "euro"]], 4: []}
QUESTIONS = ["Where was Alice born and what country is that the capital of?",
             "What does Bob like and what is it made of?", "Seine?"]


class CountingRetriever:
    def __init__(self, base):
        self.base, self.calls = base, []

    def retrieve(self, queries, k):
        self.calls.append(list(queries))
        return self.base.retrieve(queries, k)


@pytest.fixture
def parts():
    enc = HashingEncoder(64)
    return CountingRetriever(DenseRetriever.from_passages(PASSAGES, enc, cache=False)), enc


def test_loop_batches_stages_and_ranks_by_best_candidate(parts):
    ret, enc = parts
    sys = from_components(ret, TRIPLES, enc, K0=3, N=4, L=3, top_k=4)
    res = sys.run_batch(QUESTIONS)
    assert [r.question for r in res] == QUESTIONS
    rounds = max(len(r.steps) for r in res)
    assert len(ret.calls) == rounds  # one retriever call per round, all questions together
    assert len(ret.calls[0]) == len(QUESTIONS)
    names = {s.name for s in res[0].trace.spans}
    assert {"retrieve", "align", "construct", "rank"} <= names
    assert sum(s.name == "retrieve" for s in res[0].trace.spans) == rounds
    for r in res:
        assert len(r.chain) == len(set(r.chain)) and len(r.chain) <= 3
        best = {}
        for st in r.steps:
            assert st.scores == sorted(st.scores, reverse=True)
            assert len(st.candidates) <= 4 and len(st.candidates) == len(st.candidate_pids)
            assert st.chosen is None or st.chosen in st.candidates
            assert all(c not in r.chain[:len([s for s in r.steps if s.round < st.round and s.chosen])]
                       for c in st.candidates)
            for pid, sc in zip(st.candidate_pids, st.scores):
                best[pid] = max(best.get(pid, -np.inf), sc)
        ranked = [(p.pid, p.score) for p in r.passages if p.score > -np.inf]
        want = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        assert [p for p, _ in ranked] == [p for p, _ in want]
        np.testing.assert_allclose([s for _, s in ranked], [s for _, s in want], atol=1e-5)
        assert len(r.passages) == min(4, len({p.pid for p in r.passages}))
    # round 2's query carries the chain
    assert "knowledge triples: <" in res[0].steps[1].query


def test_aligner_scores_match_encoder(parts):
    ret, enc = parts
    store = TripleStore(TRIPLES)
    sys = KiRAG(ret, store, enc, K0=5, N=50, L=1)
    r = sys.run(QUESTIONS[0])
    q = enc.encode([QUESTIONS[0]])[0]
    t = enc.encode([f"{s} {p} {o}" for s, p, o in r.steps[0].candidates])
    np.testing.assert_allclose(r.steps[0].scores, t @ q, atol=1e-5)
    assert len(r.steps[0].candidates) == len(store)  # all well-formed triples (malformed dropped)


def test_heuristic_constructor_follows_links_and_stops():
    a, b, c, d = ("A", "r", "B"), ("B", "r", "C"), ("X", "r", "Y"), ("B", "s", "A")
    assert heuristic_decision(ConstructorInput("q", [], [c, a], [0.9, 0.5])).choice == 0
    # linked to the last triple beats a better unlinked one
    assert heuristic_decision(ConstructorInput("q", [a], [c, b], [0.9, 0.5])).choice == 1
    # nothing adds a new entity -> stop
    d0 = heuristic_decision(ConstructorInput("q", [a], [d, a], [0.9, 0.5]))
    assert d0.choice is None and d0.stop
    assert HeuristicConstructor().construct([]) == []


def test_parse_constructor_is_tolerant():
    cands = [("Paris", "capital of", "France"), ("Alice", "born in", "Paris")]
    out = parse_constructor("<alice; born in; PARIS>\n<Paris; capital of; France>\nthe answer is France.",
                            cands)
    assert out.written == [1, 0] and out.answer_after == 2 and out.answer == "France"
    out = parse_constructor("The answer is: Paris", cands)
    assert out.written == [] and out.answer_after == 0 and out.answer == "Paris"
    out = parse_constructor("<Mars; is; red> (Alice; born in; Paris)", cands)
    assert out.written == [None, 1] and out.answer is None
    for junk in ("", "<<<;;>>", None, 42, "the answer is", "\x00" * 10):
        parse_constructor(junk, cands)  # never raises


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


def test_llm_constructor_over_http(server, parts):
    ret, enc = parts
    llm = OpenAIChat("fake", base_url=server.url, api_key="k", timeout=5.0, max_retries=1, backoff=0.01)
    server.script([
        # question 1: round 1 picks Alice's triple (a triple outside the candidates comes first
        # and is filtered), round 2 completes the chain and answers
        {"contains": ["Where was Alice", "capital of?\nThought: <Alice; born in; Paris>,"],
         "reply": " <Paris; capital of; France>. So the answer is France."},
        {"contains": ["Where was Alice", "capital of?\nThought:"],
         "reply": " <Moon; made of; cheese>, <Alice; born in; Paris>, <Paris; capital of; France>. "
                  "So the answer is France."},
        # question 2: garbage every round -> heuristic fallback, never a crash
        {"contains": "What does Bob like", "reply": "I cannot help with that ;;; <<>>"},
        # question 3: answers at once
        {"contains": "Seine?", "reply": "The answer is the Seine river."},
        # the reader
        {"contains": "the entity or value the question asks for", "reply": "France"},
    ])
    sys = from_components(ret, TRIPLES, enc, llm=llm, K0=3, N=4, L=3, top_k=3)
    assert isinstance(sys.constructor, LLMConstructor)
    r1, r2, r3 = sys.run_batch(QUESTIONS)
    assert r1.chain == [("Alice", "born in", "Paris"), ("Paris", "capital of", "France")]
    assert r1.stopped == "answer" and r1.answer == "France"
    assert r2.steps and all(s.decision.fallback for s in r2.steps)
    assert r3.chain == [] and r3.stopped == "answer" and r3.steps[0].decision.answer == "the Seine river"
    assert "answer" in {s.name for s in r1.trace.spans}


def test_llm_constructor_survives_a_dead_server(parts):
    ret, enc = parts
    llm = OpenAIChat("fake", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=0.5,
                     max_retries=0, backoff=0.01)
    res = from_components(ret, TRIPLES, enc, llm=llm, K0=3, N=4, L=2).run_batch(QUESTIONS[:2])
    assert all(s.decision.fallback for r in res for s in r.steps)
    assert all(r.answer is None for r in res)


def test_bad_arguments(parts):
    ret, enc = parts
    with pytest.raises(TypeError, match="triples_by_pid"):
        from_components(ret, [1, 2], enc)
    with pytest.raises(ValueError, match="K0"):
        from_components(ret, TRIPLES, enc, K0=0)
    with pytest.raises(TypeError, match="retriever"):
        from_components(object(), TRIPLES, enc)
    with pytest.raises(TypeError, match="questions"):
        from_components(ret, TRIPLES, enc).run_batch("one string")
    with pytest.raises(ValueError, match=r"questions\[0\]: empty"):
        from_components(ret, TRIPLES, enc).run_batch([""])
    with pytest.raises(TypeError, match="llm"):
        LLMConstructor(object())


# ----------------------------------------------------------------------------- aligner training
def tiny_bi_encoder(tmp_path, words):
    """A 1-layer, 32-d BERT bi-encoder with a word-level vocabulary, built offline."""
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models
    from transformers import BertConfig, BertModel, BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(d / "vocab.txt")).save_pretrained(str(d))
    import torch
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=64)).save_pretrained(str(d))
    return SentenceTransformer(modules=[models.Transformer(str(d), max_seq_length=32),
                                        models.Pooling(32, "mean"), models.Normalize()],
                               device="cpu")


def synthetic_pairs(rng, n=24):
    ents = [f"e{i}" for i in range(12)]
    pairs = []
    for _ in range(n):
        a, b, c = rng.choice(ents, 3, replace=False)
        pos = f"{a} rel {b}"
        negs = [f"{x} rel {y}" for x, y in (rng.choice(ents, 2, replace=False) for _ in range(5))
                if x != a]
        pairs.append(AlignerPair(f"who is {a}", pos, negs))
    return pairs, set(ents) | {"who", "is", "rel"}


def test_train_aligner_loss_falls_and_save_load(tmp_path):
    rng = np.random.default_rng(0)
    pairs, words = synthetic_pairs(rng)
    model = tiny_bi_encoder(tmp_path, words)
    with torch_threads(1):  # tiny ops: one thread avoids barrier waits on a busy machine
        tr = train_aligner(pairs, model=model, epochs=6, batch_size=8, lr=5e-3, temperature=0.1)
    assert len(tr.losses) == 6 * 3
    assert np.mean(tr.losses[-3:]) < 0.7 * np.mean(tr.losses[:3])
    enc = tr.encoder()
    e1 = enc.encode(["who is e1", "e1 rel e2"])
    path = save_aligner(tr, tmp_path / "aligner")
    e2 = load_aligner(path).encode(["who is e1", "e1 rel e2"])
    np.testing.assert_allclose(e1, e2, atol=1e-5)
    with pytest.raises(FileNotFoundError):
        load_aligner(tmp_path)
    with pytest.raises(ValueError, match="pairs"):
        train_aligner([], model=model)
    with pytest.raises(ValueError, match="temperature"):
        train_aligner(pairs, model=model, temperature=0)


# ----------------------------------------------------------------------------- MuSiQue data
@pytest.mark.data
def test_musique_silver_chains(data_dir):
    from rasfast.systems.kirag import load_musique_chains, training_pairs
    ds, store, chains = load_musique_chains(data_dir)
    assert len(chains) == len(ds.questions) == 100
    assert sum(c.complete for c in chains) >= 90
    for c, q in zip(chains, ds.questions):
        # every silver triple comes from one of the question's gold passages
        assert set(store.pid_of[c.triple_ids].tolist()) <= set(q.gold_pids)
    pairs = training_pairs(chains, store, max_negatives=5)
    assert len(pairs) == sum(len(c.triple_ids) for c in chains)
    assert all(p.positive not in p.negatives and len(p.negatives) == 5 for p in pairs)


# ----------------------------------------------------------------------------- CLI
def test_cli_parses_kirag_commands():
    from rasfast.cli import build_parser
    a = build_parser().parse_args(["eval", "kirag", "--dataset", "musique", "--kirag-no-train",
                                   "--kirag-folds", "3"])
    assert a.what == "kirag" and a.kirag_train is False and a.kirag_folds == 3
    a = build_parser().parse_args(["kirag", "train", "--out", "x", "--max-steps", "2"])
    assert a.kirag_command == "train" and a.max_steps == 2
    # the defaults are the paper's aligner training (KiRAG App. B.3), frozen, not tuned here
    assert (a.epochs, a.train_batch, a.lr, a.temperature, a.max_negatives) == (10, 64, 2e-5, 0.01, 7)


@pytest.mark.data
def test_cli_kirag_train_on_musique(data_dir, tmp_path, capsys):
    from rasfast.cli import main
    words = {"the", "of", "who", "is", "was", "in", "born", "by", "and"}
    tiny_bi_encoder(tmp_path, words).save(str(tmp_path / "tiny_st"))
    with torch_threads(1):
        assert main(["kirag", "train", "--out", str(tmp_path / "al"), "--data-root", str(data_dir),
                     "--model", str(tmp_path / "tiny_st"), "--max-steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "100 silver chains" in out and "trained 2 steps" in out
    assert load_aligner(tmp_path / "al").encode(["who was born"]).shape == (1, 32)


@pytest.mark.data
def test_cli_kirag_train_verifies_chains_and_draws_retrieved_negatives(data_dir, tmp_path, capsys,
                                                                     monkeypatch):
    """``--verify-llm`` keeps the chains a reader answers from (here: a reader that knows the
    answers of every other question); ``--negatives`` picks the paper's retrieved documents
    (default) or the question's paragraphs, and the two give different training pairs."""
    import rasfast.llm.adapters as adapters
    from rasfast.cli import main
    from rasfast.data import load_dataset
    from rasfast.systems.kirag import silver

    ds = load_dataset("musique", data_dir)
    known = {q.question: q.answer for i, q in enumerate(ds.questions) if i % 2 == 0}

    class Reader:
        def generate(self, prompts, max_new_tokens=32, stop=None, temperature=0.0):
            out = []
            for p in prompts:
                p = p if isinstance(p, str) else "\n".join(m["content"] for m in p)   # chat messages
                hit = [a for q, a in known.items() if q in p]
                out.append(f"So the answer is {hit[0]}." if hit else "I do not know.")
            return out

    specs = []
    monkeypatch.setattr(adapters, "make_llm", lambda kind, **kw: specs.append((kind, kw)) or Reader())
    seen = {}
    real_pairs = silver.training_pairs

    def spy(chains, store, **kw):
        pairs = real_pairs(chains, store, **kw)
        seen[kw.get("retriever") is not None] = pairs
        return pairs
    monkeypatch.setattr(silver, "training_pairs", spy)
    words = {"the", "of", "who", "is", "was", "in", "born", "by", "and"}
    tiny_bi_encoder(tmp_path, words).save(str(tmp_path / "tiny_st"))
    with torch_threads(1):
        for neg in ("retrieved", "paragraphs"):
            assert main(["kirag", "train", "--out", str(tmp_path / neg), "--data-root", str(data_dir),
                         "--model", str(tmp_path / "tiny_st"), "--max-steps", "1", "--quiet",
                         "--verify-llm", "local:smollm2", "--negatives", neg]) == 0
    out = capsys.readouterr().out
    assert specs[0][0] == "local:smollm2"
    assert "50 of 100 silver chains verified by the reader" in out
    assert "negatives from the retrieved documents" in out and "negatives from the paragraphs" in out
    assert set(seen) == {True, False}
    assert [p.positive for p in seen[True]] == [p.positive for p in seen[False]]
    assert [p.negatives for p in seen[True]] != [p.negatives for p in seen[False]]


@pytest.mark.data
def test_cli_eval_kirag_zero_shot_with_hashing_encoder(data_dir, capsys, tmp_path):
    import json

    from rasfast.cli import main
    out_json = tmp_path / "k.json"
    assert main(["eval", "kirag", "--dataset", "musique", "--data-root", str(data_dir),
                 "--encoder", "hashing", "--kirag-no-train", "--no-progress",
                 "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "| dense |" in text and "| KiRAG zero-shot aligner |" in text
    rows = {r["method"]: r for r in json.loads(out_json.read_text())["rows"]}
    assert set(rows) == {"dense", "dense + GEAR NaiveGE", "KiRAG zero-shot aligner"}
    for r in rows.values():
        assert 0.0 <= r["recall@3"] <= r["recall@5"] <= r["recall@10"] <= 1.0


# ------------------------------------------------------------------ LLM-path regressions (issue 21)
class ScriptedLLM:
    """generate() scripted per prompt kind: ``reader``/``constructor`` map a question
    substring to a reply, or to an exception to raise for that prompt (as OpenAIChat does
    through LLMBatchError); ``short`` drops the last reply of every batch."""

    def __init__(self, constructor=None, reader=None, short=False):
        self.constructor, self.reader, self.short = constructor or {}, reader or {}, short
        self.calls = 0

    def generate(self, prompts, max_new_tokens=128, stop=None, temperature=0.0):
        from rasfast.llm.base import PartialBatchError
        self.calls += 1
        out, failed = [], False
        for p in prompts:
            p = p if isinstance(p, str) else "\n".join(m["content"] for m in p)   # chat messages
            table = self.reader if "the entity or value the question asks for" in p else self.constructor
            question = p.rsplit("Question:", 1)[-1].split("\n")[0]
            reply = next((v for k, v in table.items() if k in question), "the answer is unknown")
            if isinstance(reply, Exception):
                failed = True
            out.append(reply)
        if failed:
            raise PartialBatchError("some prompts failed", out, prompts)
        return out[:-1] if self.short and len(out) > 1 else out


def test_reader_with_fewer_replies_never_drops_questions(parts):
    ret, enc = parts
    llm = ScriptedLLM(reader={"Alice": "Paris", "Bob": "milk", "Seine": "France"}, short=True)
    res = from_components(ret, TRIPLES, enc, llm=llm, K0=3, N=4, L=2).run_batch(QUESTIONS)
    assert [r.question for r in res] == QUESTIONS          # was: 1 result for 3 questions
    assert [r.answer for r in res] == ["Paris", "milk", "France"]


def test_one_failed_prompt_only_affects_its_question(parts):
    ret, enc = parts
    boom = RuntimeError("server error 500 for this prompt")
    llm = ScriptedLLM(constructor={"Alice": boom,
                                   "Bob": "<Bob; likes; cheese>\n<cheese; made of; milk>\nthe answer is milk"},
                      reader={"Alice": "Paris", "Bob": boom})
    res = from_components(ret, TRIPLES, enc, llm=llm, K0=3, N=4, L=2).run_batch(QUESTIONS[:2])
    alice, bob = res
    # Bob's good constructor reply was used (not thrown away with the failed batch)
    assert bob.steps[0].decision.fallback is False and bob.chain[0] == ("Bob", "likes", "cheese")
    assert bob.stopped == "answer" or bob.chain[-1] == ("cheese", "made of", "milk")
    # Alice's failed prompt fell back to the heuristic for her alone, and says so
    assert alice.steps[0].decision.fallback and "server error 500" in alice.steps[0].decision.error
    assert "constructor[0]" in alice.errors
    # the reader failure for Bob is recorded; his constructor answer stands
    assert alice.answer == "Paris"
    assert "reader" in bob.errors and "server error 500" in bob.errors["reader"]
    assert bob.answer == "milk"


def test_parse_constructor_reads_names_with_parentheses():
    cands = [("Kirton End", "location", "Boston (Lincolnshire)"),
             ("Boston (Lincolnshire)", "population", "35,124"),
             ("Blind Shaft (film)", "directed by", "Li Yang")]
    out = parse_constructor("<Kirton End; location; Boston (Lincolnshire)>, <Boston (Lincolnshire); "
                            "population; 35,124>. So the answer is 35,124.", cands)
    assert out.written == [0, 1] and out.answer_after == 2 and out.answer == "35,124"
    out = parse_constructor("(Blind Shaft (film); directed by; Li Yang)\nthe answer is Li Yang", cands)
    assert out.written == [2] and out.answer == "Li Yang"
    out = parse_constructor("[Blind Shaft (film); directed by; Li Yang]", cands)
    assert out.written == [2] and out.answer is None


def test_answer_marker_inside_an_entity_name_is_not_the_answer():
    cands = [("X", "directed", "The Answer Is Blowin"), ("Y", "born", "1950")]
    out = parse_constructor("<X; directed; The Answer Is Blowin>, <Y; born; 1950>", cands)
    assert out.written == [0, 1] and out.answer is None and out.answer_after is None
    out = parse_constructor("<X; directed; The Answer Is Blowin>\nThe answer is: 1950.", cands)
    assert out.written == [0] and out.answer_after == 1 and out.answer == "1950"
    from rasfast.systems.kirag.prompts import parse_answer
    assert parse_answer("<X; directed; The Answer Is Blowin> so the answer is Y") == "Y"


def test_reader_reads_the_top_3_documents_by_default(parts):
    ret, enc = parts
    seen = []

    class Reader(ScriptedLLM):
        def generate(self, prompts, *a, **kw):
            texts = [p if isinstance(p, str) else "\n".join(m["content"] for m in p) for p in prompts]
            seen.extend(p for p in texts if "the entity or value the question asks for" in p)
            return super().generate(prompts, *a, **kw)

    from_components(ret, TRIPLES, enc, llm=Reader(), K0=5, N=4, L=2, top_k=5).run(QUESTIONS[0])
    reader = [p for p in seen if "Document 1:" in p]
    assert reader and all("Document 3:" in p and "Document 4:" not in p for p in reader)
    assert all("Facts:" not in p for p in reader)   # the paper's reader: documents only
    seen.clear()
    from_components(ret, TRIPLES, enc, llm=Reader(), K0=5, N=4, L=2, top_k=5, reader_docs=5,
                    reader_chain=True).run(QUESTIONS[0])
    assert any("Document 5:" in p for p in seen)
    with pytest.raises(ValueError, match="reader_docs"):
        from_components(ret, TRIPLES, enc, reader_docs=0)


def test_training_negatives_come_from_the_step_retrieval_and_chains_are_reader_checked():
    from rasfast.systems.kirag import SilverChain, training_pairs, verify_chains
    store = TripleStore(TRIPLES)
    a = store.triples.index(("Alice", "born in", "Paris"))
    b = store.triples.index(("Paris", "capital of", "France"))
    chain = SilverChain("q1", QUESTIONS[0], [a, b], ["", ""], paragraph_pids=[0, 1])

    class Retriever:
        def __init__(self):
            self.calls = []

        def retrieve(self, queries, k):
            self.calls.append((list(queries), k))
            # step 1 retrieves Bob's passage, step 2 France's
            return [[RetrievedPassage(2 if "knowledge triples" not in q else 3, "", "", 0.0)]
                    for q in queries]

    from rasfast.types import RetrievedPassage
    ret = Retriever()
    pairs = training_pairs([chain], store, retriever=ret, K0=4)
    assert len(ret.calls) == 1 and ret.calls[0][1] == 4 and len(ret.calls[0][0]) == 2  # one call
    assert pairs[0].positive == "Alice born in Paris"
    assert set(pairs[0].negatives) == {"Bob likes cheese", "cheese made of milk"}      # step 1's docs
    assert set(pairs[1].negatives) == {"France currency euro"}                          # step 2's docs
    # without a retriever: the question's own paragraphs, never the chain's triples
    plain = training_pairs([chain], store)
    assert set(plain[0].negatives) == {"Paris located on Seine"}
    # the reader check keeps only the chains a reader answers from
    good = SilverChain("q1", QUESTIONS[0], [a, b], ["", ""])
    bad = SilverChain("q2", QUESTIONS[1], [a], [""])
    llm = ScriptedLLM(reader={"Alice": "the answer is France", "Bob": "Paris"})
    kept = verify_chains([good, bad], store, {"q1": ["France"], "q2": ["milk"]}, llm)
    assert [c.qid for c in kept] == ["q1"]


def test_constructor_prompt_has_the_papers_structure():
    """Figure 7 of the KiRAG paper: instruction, worked examples, then Context (candidate
    triples), Question, and Thought holding the chain so far, which the model continues."""
    from rasfast.systems.kirag.prompts import CONSTRUCTOR_EXAMPLES, constructor_prompt, parse_constructor
    cands = [("Paris", "capital of", "France"), ("Alice", "born in", "Paris (Texas)")]
    p = constructor_prompt("Where was Alice born?", [], cands)
    head, inputs = p.rsplit("\n\n", 1)
    assert inputs == ("Context: <Paris; capital of; France>, <Alice; born in; Paris (Texas)>\n"
                      "Question: Where was Alice born?\nThought:")
    assert head.count("Thought: <") == len(CONSTRUCTOR_EXAMPLES) >= 1 and "So the answer is" in head
    p2 = constructor_prompt("Where was Alice born?", [cands[1]], cands)
    assert p2.endswith("Thought: <Alice; born in; Paris (Texas)>,")
    # every example's thought parses as a chain over its own context, ending in the answer
    for context, _, thought in CONSTRUCTOR_EXAMPLES:
        ctx = [tuple(x.strip() for x in t.split(";")) for t in context.strip("<>").split(">, <")]
        out = parse_constructor(thought, ctx)
        assert out.written and None not in out.written and out.answer and out.answer_after == len(out.written)
