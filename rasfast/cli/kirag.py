"""CLI of KiRAG: ``rasfast kirag train`` and the options of ``rasfast eval kirag`` (rasfast/cli/evaluate.py).

Heavy imports (sentence-transformers, the data) happen inside the handlers, so building the
parser stays cheap.
"""
from __future__ import annotations

import argparse
import json

from ..systems.kirag.aligner import PAPER_TRAINING  # light: torch is imported only when training
from .errors import int_at_least, positive_float, positive_int


def _train_args(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument(f"--{prefix}epochs", type=positive_int, default=PAPER_TRAINING["epochs"], help="aligner training epochs (paper: 10)")
    p.add_argument(f"--{prefix}max-steps", type=positive_int, default=None, help="stop training after this many steps")
    p.add_argument(f"--{prefix}train-batch", type=positive_int, default=PAPER_TRAINING["batch_size"], help="pairs per training step (paper: 64)")
    p.add_argument(f"--{prefix}lr", type=positive_float, default=PAPER_TRAINING["lr"])
    p.add_argument(f"--{prefix}temperature", type=positive_float, default=PAPER_TRAINING["temperature"], help="contrastive loss tau (paper: 0.01)")
    p.add_argument(f"--{prefix}max-negatives", type=int_at_least(0), default=PAPER_TRAINING["max_negatives"])
    p.add_argument(f"--{prefix}seed", type=int, default=0)
    p.add_argument(f"--{prefix}negatives", choices=("retrieved", "paragraphs"), default="retrieved",
                   help="negative triples per step: those of the documents the dense retriever "
                        "returns for the step's query (the paper) or of the question's own paragraphs")


def add_parser(subparsers) -> None:
    """Registers ``rasfast kirag ...``."""
    k = subparsers.add_parser("kirag", help="KiRAG tools (aligner training)")
    ks = k.add_subparsers(dest="kirag_command", required=True)
    t = ks.add_parser("train", help="fine-tune the reasoning chain aligner on MuSiQue silver chains")
    t.add_argument("--out", required=True, help="directory to save the aligner in")
    t.add_argument("--dataset", default="musique", choices=["musique"])
    t.add_argument("--model", default=None, help="sentence-transformers model path (default MiniLM)")
    t.add_argument("--data-root", default=None)
    t.add_argument("--questions", default=None, metavar="A-B",
                   help="train on the silver chains of questions A to B only (1-based, inclusive), e.g. "
                        "1-50, so that `eval qa --questions 51-100 --kirag-aligner DIR` is held out")
    t.add_argument("--verify-llm", default=None, metavar="SPEC",
                   help="keep only the silver chains this reader answers from, as the paper filters "
                        "its chains (an --llm spec: local, local:PATH.gguf, openai, ...)")
    t.add_argument("--base-url", default=None, help="server URL for --verify-llm openai")
    t.add_argument("--llm-model", default=None, help="model name for --verify-llm openai/hf/vllm")
    _train_args(t)
    t.add_argument("--quiet", dest="progress", action="store_false")
    t.set_defaults(func=cmd_train)


def add_eval_args(p: argparse.ArgumentParser) -> None:
    """Options of ``rasfast eval kirag`` (prefixed ``--kirag-``: the names the once shared eval parser gave them)."""
    p.add_argument("--kirag-folds", type=int_at_least(2), default=2, help="cross-validation folds")
    p.add_argument("--kirag-no-train", dest="kirag_train", action="store_false",
                   help="skip the trained aligner (zero-shot only)")
    _train_args(p, prefix="kirag-")


def cmd_train(args) -> int:
    from ..systems.kirag.aligner import save_aligner, train_aligner
    from ..systems.kirag.silver import load_musique_chains, training_pairs

    ds, store, chains = load_musique_chains(args.data_root)
    if args.questions:
        from ..qa_eval.run import parse_questions
        try:
            a, b = parse_questions(args.questions, None)
        except ValueError as e:
            raise SystemExit(f"kirag train: {e}")
        keep = {q.qid for q in ds.questions[a - 1:b]}
        chains = [c for c in chains if c.qid in keep]
        print(f"training on the silver chains of questions {a}-{min(b, len(ds.questions))} only")
    n_chains = len(chains)
    if args.verify_llm:
        from ..llm.adapters import make_llm
        from ..systems.kirag.silver import verify_chains
        kind, _, spec = args.verify_llm.partition(":")
        reader = make_llm(args.verify_llm if kind == "local" else kind,
                          model=args.llm_model or (spec or None), base_url=args.base_url)
        answers = {q.qid: q.answers for q in ds.questions}
        chains = verify_chains(chains, store, answers, reader)
        print(f"{len(chains)} of {n_chains} silver chains verified by the reader")
    retriever = None
    if args.negatives == "retrieved":
        from ..encode import SentenceTransformerEncoder, encode_cached
        from ..systems.ras.retrievers import DenseRetriever
        enc = SentenceTransformerEncoder(args.model) if args.model else SentenceTransformerEncoder()
        retriever = DenseRetriever(ds.passages, encode_cached(enc, [p.content for p in ds.passages]), enc)
    pairs = training_pairs(chains, store, max_negatives=args.max_negatives, seed=args.seed,
                           retriever=retriever)
    print(f"{len(chains)} silver chains ({sum(c.complete for c in chains)} complete), "
          f"{len(pairs)} training pairs, negatives from the {args.negatives} documents")
    tr = train_aligner(pairs, model=args.model, epochs=args.epochs, batch_size=args.train_batch,
                       lr=args.lr, temperature=args.temperature, max_negatives=args.max_negatives,
                       max_steps=args.max_steps, seed=args.seed, progress=args.progress)
    qids = list(dict.fromkeys(c.qid for c in chains))
    path = save_aligner(tr, args.out, trained_on={"dataset": ds.name, "questions": args.questions or "all",
                                                  "qids": qids})
    print(f"trained {len(tr.losses)} steps in {tr.seconds:.1f} s: loss {tr.losses[0]:.4f} -> "
          f"{tr.losses[-1]:.4f}; saved to {path}")
    return 0


def cmd_eval(args, encoder) -> int:
    from ..systems.kirag.eval import evaluate_kirag_musique, format_table

    if args.dataset not in ("musique", "demo"):
        raise SystemExit("eval kirag: only --dataset musique has triples and decompositions")
    try:
        out = evaluate_kirag_musique(
            args.data_root, encoder=encoder, folds=args.kirag_folds, train=args.kirag_train,
            epochs=args.kirag_epochs, batch_size=args.kirag_train_batch, lr=args.kirag_lr,
            temperature=args.kirag_temperature, max_negatives=args.kirag_max_negatives,
            max_steps=args.kirag_max_steps, seed=args.kirag_seed, progress=args.progress,
            negatives=args.kirag_negatives)
    except FileNotFoundError as e:
        raise SystemExit(f"eval kirag: {e}")
    print(f"KiRAG on MuSiQue ({out['n_questions']} questions, {out['encoder']}), recall in %:")
    print(format_table(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0
