"""A potion-style static embedding model trained here (issue 51, item 1): model2vec's
distillation of all-MiniLM-L6-v2, then tokenlearn's training recipe, re-implemented so
that nothing comes from the hub.  Three steps, each a script, all in one folder
($TOOLSRV_BENCH_STATIC, default ~/.cache/toolsrv-bench/static-train):

    python -m bench.static_model.corpus     # texts.json: Debian descriptions, stdlib docstrings
    python -m bench.static_model.teacher    # teacher.npy/.json: MiniLM's mean token vectors
    python -m bench.static_model.train      # m2v-minilm-256-trained/: the model2vec folder

train starts from `bench/search_models.py --distill DIR` (the untrained distillation;
$TOOLSRV_BENCH_DISTILLED, default ~/.cache/toolsrv-bench/m2v-minilm-256).  Run in the
survey's venv (bench/search_models.py's docstring), plus scikit-learn and scipy.  No
benchmark set is read by any step.  doc/search.md, Models surveyed, has the figures.
"""
import os

HOME = os.path.expanduser("~/.cache/toolsrv-bench")


def folder() -> str:
    """The folder the steps share (made if missing)."""
    d = os.environ.get("TOOLSRV_BENCH_STATIC") or os.path.join(HOME, "static-train")
    os.makedirs(d, exist_ok=True)
    return d
