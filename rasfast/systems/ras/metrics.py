"""RAS's answer and retrieval metrics: re-exported from :mod:`rasfast.metrics`, their one home
(EM, token F1 with the HotpotQA yes/no rule, "contains the gold", recall@k)."""
from __future__ import annotations

from ...metrics import (YES_NO, answer_scores, exact_match, golden_match, normalize_answer,  # noqa: F401
                        recall_at_k, token_f1)

__all__ = ["normalize_answer", "exact_match", "golden_match", "token_f1", "recall_at_k", "answer_scores"]
