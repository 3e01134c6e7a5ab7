"""Runs rasfast eval qa on the scripted tiny dataset (tests/qa_util.py) into a cache folder:
the process tests/test_qa_eval.py kills at random points.

    python tests/qa_eval_worker.py CACHE_DIR N_QUESTIONS DELAY_S
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from qa_util import dataset, llm  # noqa: E402
from rasfast.qa_eval import evaluate_qa  # noqa: E402

SYSTEMS = ["none", "dense", "ras", "gear-naive"]

if __name__ == "__main__":
    torch.set_num_threads(1)
    cache, n, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    evaluate_qa(dataset(n), SYSTEMS, llm(delay=delay, wrong=("river",)), "stand-in", encoder="hashing",
                cache_dir=cache, progress=False, log=lambda m: None)
    print("finished")
