"""The RAS loop (DESIGN.md section 6): ``RAS`` over batched components, tolerant parsers,
the question graph, default components (dense/faiss/theme-scoped/graph-expanded retrievers,
cached and sentence-pattern triple extractors, the heuristic baseline planner/answerer),
metrics and evaluation."""
from .extractors import CachedTripleExtractor, SentenceTripleExtractor
from .heuristic import BeamAnswerer, GraphPathReasoner, HeuristicAnswerer, HeuristicPlanner
from .loop import RAS, ErrorRecord, PlanStep, RASResult, call_isolated
from ...parse import (NoRetrieval, SubQuery, Sufficient, TripleParse, clean_triples, format_triples,
                    parse_plan, parse_triples)
from .qgraph import QuestionGraph, merge_steps, normalize_entity
from .retrievers import DenseRetriever, FaissRetriever, GraphExpandedRetriever, ThemeIndexRetriever
from .system import EvalReport, build_ras, evaluate, make_encoder, make_retriever
from ...types import (Answerer, LoopState, Planner, RetrievedPassage, Retriever, Triple,
                    TripleExtractor)

__all__ = ["RAS", "RASResult", "PlanStep", "ErrorRecord", "call_isolated",
           "NoRetrieval", "SubQuery", "Sufficient", "TripleParse", "parse_plan", "parse_triples",
           "format_triples", "clean_triples", "QuestionGraph", "merge_steps", "normalize_entity",
           "DenseRetriever", "FaissRetriever", "ThemeIndexRetriever", "GraphExpandedRetriever",
           "CachedTripleExtractor", "SentenceTripleExtractor", "HeuristicPlanner",
           "HeuristicAnswerer", "BeamAnswerer", "GraphPathReasoner", "build_ras", "evaluate", "EvalReport",
           "make_encoder", "make_retriever", "Answerer", "LoopState", "Planner",
           "RetrievedPassage", "Retriever", "Triple", "TripleExtractor"]
