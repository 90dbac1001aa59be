"""The semantic ranker's model: static word embeddings shipped inside a PyPI wheel.

Theory of operation.  The `search` extra installs `wordllama`, whose wheel carries a
256-dimension model: a 32,000 x 256 float16 table of token embeddings (WEIGHTS) and its
tokenizer (TOKENIZER).  `load` imports the package only to find its folder and reads both
files from there, so nothing is ever fetched: the tokenizer with `tokenizers`, the table
mapped read-only (`np.memmap`, float16 as stored: no copy, its pages shared with the page
cache), not through `WordLlama.load`, which makes a float32 copy (32 MiB), nor through
`safetensors`' numpy loader, which reads the table into a copy too (so `mapped_tensor`
reads the file's header itself: ten lines, the format's whole index).  `embed` is
wordllama's own embedding, the mean of a text's token rows made unit length: the same
float32 sums in the same order, so the same bits (a test compares it with wordllama's
`embed`), with a batch's rows gathered as float16 and the padding skipped (`where`), not
multiplied by a float32 mask (two texts x tokens x 256 float32 temporaries per call).
The tokenizer's cache is switched off: the model has no pre-tokenizer, so a whole text is
one "word" and its BPE cache kept every tool's text, up to 10,000 of them (38 MiB at
10,000 tools), for a cache that never hits.

Nothing here is imported at server start-up: index.py makes a `Semantic` (which imports
nothing), and the first search calls `load` (about a second, numpy and the tokenizer
included), in a worker thread when served.  A missing extra or a model that fails to
load leaves `ready` False and `error` saying why: search is then lexical.  numpy is
imported with one BLAS thread (unless the environment says otherwise): the one product
per search is about a millisecond at 10,000 tools, and a thread pool would take the cores
the server's tools run on.  `embed` returns unit vectors (float32), so a dot product is
the cosine.  Each text is cut at MAX_TOKENS tokens (the tokenizer's truncation), so one
call is short whatever a tool's text holds.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)
MAX_TOKENS = 256        # of one text embedded (a tool's or a need's); more adds little
# The model's files inside the wordllama package (wordllama's default configuration).
WEIGHTS = os.path.join("weights", "l2_supercat_256.safetensors")
TOKENIZER = os.path.join("tokenizers", "l2_supercat_tokenizer_config.json")
TENSOR = "embedding.weight"


class Semantic:
    """The embedding model, loaded on first use (`load`), or the reason it is not."""

    def __init__(self) -> None:
        self.tried = False       # load() ran (or is no longer worth running)
        self.ready = False       # the model is loaded
        self.error = ""          # why not, after a failed load
        self.dim = 0
        self.np: Any = None
        self.table: Any = None   # token id -> embedding row (float16, mapped)
        self._tok: Any = None
        self._lock = threading.Lock()

    def load(self) -> bool:
        """Load the model once (blocking); True when it is ready."""
        with self._lock:
            if self.tried:
                return self.ready
            try:
                numpy = _numpy_one_thread()
                import wordllama
                from tokenizers import Tokenizer
                folder = os.path.dirname(os.path.abspath(wordllama.__file__))
                tok = Tokenizer.from_file(os.path.join(folder, TOKENIZER))
                # a bound on each text's tokens: the search thread must not hold the
                # interpreter long; and no cache of whole texts (see the header)
                tok.enable_truncation(max_length=MAX_TOKENS)
                tok.enable_padding()      # to the batch's longest text
                resize = getattr(tok.model, "_resize_cache", None)
                if resize is not None:
                    resize(0)
                self.np, self._tok = numpy, tok
                self.table = mapped_tensor(numpy, os.path.join(folder, WEIGHTS), TENSOR)
                self.dim = int(self.embed(["probe"]).shape[1])
                self.ready = True
            except ImportError as e:
                self.error = f"{e.name or 'wordllama'} not installed"
            except Exception as e:   # a broken wheel must not break search
                self.error = f"model failed to load: {type(e).__name__}: {e}"[:200]
                log.warning("search: semantic model failed to load: %s", e)
            self.tried = True
            return self.ready

    def embed(self, texts: list[str]) -> Any:
        """Unit-length embeddings of `texts`, one float32 row each: the mean of each
        text's token rows (wordllama's `embed(texts, norm=True)`, bit for bit)."""
        np, table = self.np, self.table
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        ids = np.array([e.ids for e in encs], dtype=np.intp)
        real = np.array([e.attention_mask for e in encs], dtype=bool)   # not padding
        np.clip(ids, 0, table.shape[0] - 1, out=ids)
        out = np.sum(table[ids], axis=1, dtype=np.float32, where=real[:, :, None])
        out /= np.maximum(real.sum(axis=1, keepdims=True), 1).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def mapped_tensor(np: Any, path: str, name: str) -> Any:
    """The float16 tensor `name` of a safetensors file, mapped read-only (no copy): the
    file is an 8-byte little-endian header length, a JSON header giving each tensor's
    dtype, shape and byte range, then the data."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
    meta = head[name]
    if meta["dtype"] != "F16" or len(meta["shape"]) != 2:
        raise ValueError(f"{name}: {meta['dtype']} {meta['shape']}, not a float16 matrix")
    start, end = meta["data_offsets"]
    shape = tuple(meta["shape"])
    if end - start != shape[0] * shape[1] * 2:
        raise ValueError(f"{name}: {end - start} bytes for shape {shape}")
    return np.memmap(path, dtype=np.float16, mode="r", offset=8 + n + start, shape=shape)


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
