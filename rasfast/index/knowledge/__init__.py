"""The knowledge index: one saved index (passages, dense + theme vectors, theme model,
triples, triple graph, triple embeddings) that every system runs from, built resumably by
``rasfast index build`` (see build.py, journal.py, extract.py)."""
from .build import BuildReport, UnparsedError, add_to_knowledge_index, build_knowledge_index
from .corpus import Corpus, read_corpus
from .extract import ExtractionError, extract_triples, extraction_record
from .index import KnowledgeIndex, is_knowledge_index
from .journal import Journal, JournalError

__all__ = ["KnowledgeIndex", "build_knowledge_index", "add_to_knowledge_index", "BuildReport", "UnparsedError",
           "read_corpus", "Corpus", "extract_triples", "extraction_record", "ExtractionError",
           "Journal", "JournalError", "is_knowledge_index"]
