"""The semantic ranker's model: static word embeddings shipped inside a PyPI wheel.

Theory of operation.  The `search` extra installs `wordllama`, whose wheel carries a
256-dimension model (`weights/l2_supercat_256.safetensors`) and its tokenizer config.
Its default loader looks for the tokenizer in a folder the wheel does not have and then
tries the network; `load` instead points it at the package's own folder with downloads
disabled, so nothing is ever fetched.  Nothing here is imported at server start-up:
index.py makes a `Semantic` (which imports nothing), and the first search calls `load`
(about a second, numpy and the tokenizer included), in a worker thread when served.
A missing extra or a model that fails to load leaves `ready` False and `error` saying
why: search is then lexical.  numpy is imported with one BLAS thread (unless the
environment says otherwise): the one product per search is about a millisecond at 10,000
tools, and a thread pool would take the cores the server's tools run on.  `embed` returns
unit vectors (float32), so a dot product is the cosine.  Each text is cut at MAX_TOKENS
tokens (the tokenizer's truncation), so one call is short whatever a tool's text holds.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)
MAX_TOKENS = 256        # of one text embedded (a tool's or a need's); more adds little


class Semantic:
    """The embedding model, loaded on first use (`load`), or the reason it is not."""

    def __init__(self) -> None:
        self.tried = False       # load() ran (or is no longer worth running)
        self.ready = False       # the model is loaded
        self.error = ""          # why not, after a failed load
        self.dim = 0
        self.np: Any = None
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> bool:
        """Load the model once (blocking); True when it is ready."""
        with self._lock:
            if self.tried:
                return self.ready
            try:
                numpy = _numpy_one_thread()
                import wordllama
                from wordllama import WordLlama
                folder = os.path.dirname(os.path.abspath(wordllama.__file__))
                model = WordLlama.load(cache_dir=folder, disable_download=True)
                # a bound on each text's tokens: the model pads a batch to its longest
                # text, and the search thread must not hold the interpreter long
                model.tokenizer.enable_truncation(max_length=MAX_TOKENS)
                probe = model.embed(["probe"], norm=True)
                self.np, self._model, self.dim = numpy, model, int(probe.shape[1])
                self.ready = True
            except ImportError as e:
                self.error = f"{e.name or 'wordllama'} not installed"
            except Exception as e:   # a broken wheel must not break search
                self.error = f"model failed to load: {type(e).__name__}: {e}"[:200]
                log.warning("search: semantic model failed to load: %s", e)
            self.tried = True
            return self.ready

    def embed(self, texts: list[str]) -> Any:
        """Unit-length embeddings of `texts`, one float32 row each."""
        vecs = self._model.embed(texts, norm=True)
        return self.np.asarray(vecs, dtype=self.np.float32)


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _numpy_one_thread() -> Any:
    """numpy, imported with one BLAS thread (its pool reads these variables when it loads)
    unless the environment sets them; the environment is left as it was, so the tools the
    server runs see what they would have seen."""
    saved = {v: os.environ.get(v) for v in _BLAS_THREADS}
    try:
        for v in _BLAS_THREADS:
            os.environ.setdefault(v, "1")
        import numpy
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    return numpy
