"""Datasets: real multi-hop QA sets from ../shared/data (qa.py) and the offline demo world."""
from .qa import Passage, Question, QADataset, data_root, load_dataset, load_hotpotqa, load_musique, load_2wiki

__all__ = ["Passage", "Question", "QADataset", "data_root", "load_dataset", "load_musique",
           "load_hotpotqa", "load_2wiki"]
