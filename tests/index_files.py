"""Where a saved index keeps an array: file names carry the generation that wrote them
(rasfast.index.store), so tests look them up in the committed manifest."""
import json
import pathlib


def index_file(d, name: str) -> pathlib.Path:
    """Path of array ``name`` ('emb', 'ppd', 'pids'), 'passages' or 'theme_model' in the
    committed manifest of index directory ``d``."""
    d = pathlib.Path(d)
    m = json.loads((d / "manifest.json").read_text())
    if name == "passages":
        return d / m["passages"]["file"]
    if name == "theme_model":
        return d / m["theme_model"]["dir"]
    return d / m["arrays"][name]["file"]
