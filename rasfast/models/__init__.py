"""Neural modules of the RAS pipeline: the question-graph builder and its graph encoder."""
