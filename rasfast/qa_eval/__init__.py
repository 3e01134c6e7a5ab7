"""``rasfast eval qa``: answer quality of every registered system with one LLM and one reader.

    rasfast eval qa --dataset musique --systems none,dense,ras,gear,kirag,structrag \\
        --llm local [--questions 51-100 | --limit N] [--json out.json]

One LLM backend (``--llm``, e.g. the local GGUF model) serves every LLM role of every
system, greedy, and every system's final answer goes through the reader contract
(:mod:`rasfast.llm.reader`: one instruction family, answer shape, token budget and
post-processing; ``--reader one-shot`` is GEAR's App. J.3 prompt). Systems
(:data:`rasfast.qa_eval.systems.SYSTEMS`):

- ``none``: closed book; ``dense`` / ``bm25`` / ``hybrid``: the top-``k`` passages of one
  retrieval (MiniLM dense, BM25, their RRF);
- ``ras``, ``gear`` (the agent), ``gear-sync``, ``gear-naive``, ``kirag``, ``structrag``: the
  system registry (:func:`rasfast.systems.build_system`) over a knowledge index of the
  dataset's corpus (built once and cached; the corpus's own triples, e.g. MuSiQue's OpenIE
  ones, or model-free sentence-pattern triples for a corpus without any), on the base
  retriever ``--retriever`` (dense, bm25 or hybrid);
- rasfast's own variants, labelled as such in every table: ``ras+passages``,
  ``ras-passages``, ``structrag-chunk``.

Each system is one :class:`~.spec.SystemSpec` (:mod:`.spec`; the built-in ones in
:mod:`.systems`): a new system is one module that registers its spec (and its system in
:mod:`rasfast.systems.registry`); ``eval qa``, ``--report``, the HTML report, the role table,
the cache keys and the command line's choices all follow the registered specs. One frozen
:class:`~.config.EvalConfig` holds the settings and names every cache file.

Per system: EM and F1 (SQuAD normalisation, best over the gold answer and its aliases;
HotpotQA and 2Wiki with their official yes/no rule), recall@5/10/15 of the passages it
returned, whether a gold answer was in what it retrieved and in what its reader was shown,
where each question was lost, LLM calls, tokens and seconds per question, errors, and per
LLM role the share of replies without the asked-for form. Paired bootstrap intervals
against dense RAG come with every table.

Resumable: every question's record (:mod:`.records`) is appended whole to a JSONL file per
(dataset, system, LLM, settings) under ``--cache-dir``; the settings hash every prompt
module and reader setting of the system's family, so a changed prompt starts a fresh file.
A corpus that ships no triples (HotpotQA) gets rasfast's model-free ones; their knowledge
index and the records of the systems that read triples (RAS, GEAR, KiRAG) are keyed on the
extractor's code, so a changed extractor rebuilds the index and reruns those systems.
A rerun skips the questions already there.
"""
from .cli import add_args, cmd_eval_qa
from .records import RecordFile, answer_in_text, failure_stage, stage_counts
from .roles import RoleRecorder
from .config import EvalConfig
from .run import (DATASETS, PROMPT_STYLES, cache_file, encoder_name, evaluate_qa, llm_label, parse_questions,
                  prep_settings, report_qa, settings_for)
from .spec import PrepareContext, SystemSpec, register_spec, unregister_spec
from .systems import (FAMILY, LABELS, PREP, SYSTEMS, Prepared, get_spec, knowledge_index, make_preparer, reader_input,
                      specs)
from .tables import format_rows, paired_against, paired_bootstrap, summarise

__all__ = ["evaluate_qa", "report_qa", "llm_label", "encoder_name", "summarise", "format_rows", "RoleRecorder",
           "SYSTEMS", "DATASETS", "FAMILY", "LABELS", "RecordFile", "failure_stage", "stage_counts",
           "answer_in_text", "paired_bootstrap", "paired_against", "cache_file", "settings_for",
           "parse_questions", "make_preparer", "reader_input", "Prepared", "PREP", "prep_settings", "knowledge_index", "add_args", "cmd_eval_qa", "PROMPT_STYLES",
           "EvalConfig", "SystemSpec", "PrepareContext", "register_spec", "unregister_spec", "get_spec", "specs"]
