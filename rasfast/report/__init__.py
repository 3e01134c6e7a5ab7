"""Offline HTML reports: one self-contained file that opens from disk, with no server, no
network, no scripts and no external fonts.

- :mod:`.html`: escaping and the page shell (inline CSS; a Content-Security-Policy that
  forbids every external load and every script, so the file cannot reach out even by mistake);
- :mod:`.qgraph_svg`: a question graph (entities as nodes, predicates as edges, coloured by
  the step that found them) laid out by networkx and written as inline SVG;
- :mod:`.charts`: stacked bars (where questions were lost) and timing bars;
- :mod:`.record_page`: everything one system did on one question, from its ``eval qa``
  record (:mod:`rasfast.qa_eval.records`);
- :mod:`.eval_page`: a whole evaluation: the table, the failure-stage chart, the filters and
  the per-question drill-down.

:mod:`rasfast.qa_eval.report_html` writes the files (``rasfast eval qa --html``,
``rasfast ask --html``).
"""
