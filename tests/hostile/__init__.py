"""Tools and corpus for the hostile-input tests (see make_corpus.py)."""
