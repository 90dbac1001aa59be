"""Discovery: rank the registry's visible tools against a need written in words.

Theory of operation.  A `SearchIndex` follows one `Registry`: the registry tells it each
name whose served Tool moved (`Registry.on_tool_change`), and the index only marks that
name dirty.  The next search re-indexes the dirty names alone (`sync`), so a change that
bumps `revision` is searchable by the next query with no rebuild; the first search builds
everything.  Only the registry's visible tools (variants applied, a command found) are
ever indexed, so a hidden tool is never ranked.

Two rankers, fused:
  lexical   BM25 over the words of each tool's fields, each field's term frequency
            weighted (FIELDS: name split at `_ . -` and case changes, keywords, the
            description, argument names and descriptions, the prompt), with one length
            normalisation over the weighted length (the simple form of BM25F).  Postings
            are term -> slot -> weighted tf, so one tool's change touches only its terms.
  semantic  the cosine of the need's and each tool's embedding (semantic.py: a static
            model shipped inside a PyPI wheel, the `search` extra), loaded on the first
            search, never at start-up.  Without the extra, or if it fails to load, search
            is lexical and says so once (`notice`).
Fusion (fusion.py, FUSION): each ranker's scores put on a per-query scale and weighed, the
method and weight chosen on a development split of public tool-retrieval sets
(bench/search_fusion.py, doc/search.md).  Scores are the fused value, printed with three
decimals; ties break by name, so the order is deterministic.

With numpy importable the scoring loops run as array operations (each term's BM25 weights
kept as arrays, made again when its postings, the tool count or the total length move);
without it, plain dicts compute the same scores.  Threads: the registry hook (`_moved`)
and `pending` run on the registry's thread (the event loop) and only touch the dirty set
and read the registry; `apply`, `search` and `load_semantic` (tokenising, embedding,
scoring) run in tree/searchfile.py's one search worker thread, one at a time, so the
event loop never indexes or embeds (issue 25).  What one tool costs is bounded
(FIELD_CHARS, SEMANTIC_CHARS), so no single call holds the interpreter long.
"""
from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

from ...errors import P9Error, too_long
from .fusion import fuse

NEED_MAX = 4096         # bytes of one need
LIMIT_DEFAULT = 10
LIMIT_MAX = 100
K1, B = 1.2, 0.75
# Field weights of the lexical ranker: keywords are the discovery vocabulary.
FIELDS = (("name", 3.0), ("keywords", 3.0), ("description", 2.0), ("args", 1.0),
          ("prompt", 0.5))
# Bounds on what one tool costs to index, whatever its .meta holds (metafile.py refuses
# prose fields past 64 KiB; args descriptions are bounded only by the file's 1 MiB): the
# characters of each field's text that BM25 reads, and of the text the model embeds (it
# pads a batch to its longest text and does not truncate; an average of 2 KiB of words is
# as good as the whole).  EMBED_BATCH texts per model call.
FIELD_CHARS = 64 << 10
SEMANTIC_FIELDS = ("name", "description", "keywords", "argnames")
SEMANTIC_CHARS = 2048
EMBED_BATCH = 16
WORDS_CHUNK = 4096      # characters per regex call when splitting a long text into words
LEXICAL_NOTICE = "# search is lexical only: the semantic ranker is not installed"

_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_STOP = frozenset(
    "a an and any are as at be by can do does for from get given how i in into is it its "
    "me my of on or our please show some than that the their them then there these this "
    "to use using want what when where which while who will with would you your".split())


def parse_need(data: bytes, limit: int = LIMIT_DEFAULT) -> tuple[str, int]:
    """One write of a search file -> (the need, the limit), or P9Error (worded for 9pfuse).

    An optional first line `limit N` (1..LIMIT_MAX) sets how many tools to return (else
    `limit`).  A write of that line alone returns ("", N): the caller keeps N for the
    next need (a shell's printf may write the two lines apart)."""
    if len(data) > NEED_MAX:
        raise P9Error(too_long("search", NEED_MAX, "need"))
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise P9Error("search: need is not UTF-8 (illegal byte sequence)") from None
    first, _, rest = text.lstrip("\n").partition("\n")
    words = first.split()
    if words[:1] == ["limit"]:
        if len(words) != 2 or not words[1].isascii() or not words[1].isdigit() \
                or not 1 <= int(words[1]) <= LIMIT_MAX:
            raise P9Error(f"search: limit must be a whole number from 1 to {LIMIT_MAX} "
                          "(invalid argument)")
        limit, text = int(words[1]), rest
        if not text.strip():
            return "", limit
    need = " ".join(text.split())
    if not need:
        raise P9Error("search: empty need: write what the tool should do "
                      "(invalid argument)")
    return need, limit


def stem(w: str) -> str:
    """A light English suffix stripper (plurals, -ing, -ed): enough to meet `files` with
    `file` and `reading` with `read`, never so eager that short words collide."""
    if len(w) <= 3:
        return w
    for suf, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""),
                      ("s", "")):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            if suf == "s" and w.endswith(("ss", "us", "is")):
                return w
            if suf == "es" and not w.endswith(("ches", "shes", "xes", "zes", "sses")):
                continue        # "files" -> "file" by "s" below, not "fil"
            w = w[:len(w) - len(suf)] + keep
            if suf in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]       # "running" -> "run"
            return w
    return w


def words(text: str) -> list[str]:
    """The searchable words of `text`: identifiers split at `_ . -` and case changes,
    lower-cased, stop words dropped, stemmed.  A long text is split in pieces of about
    WORDS_CHUNK characters (at a space), so no one regex call holds the interpreter long."""
    if len(text) <= WORDS_CHUNK:
        return [stem(w) for m in _WORD.findall(text) if (w := m.lower()) not in _STOP]
    out: list[str] = []
    i = 0
    while i < len(text):
        j = text.find(" ", i + WORDS_CHUNK) if i + WORDS_CHUNK < len(text) else -1
        j = len(text) if j < 0 else j
        out += [stem(w) for m in _WORD.findall(text, i, j) if (w := m.lower()) not in _STOP]
        i = j
    return out


def arg_text(schema: Any, depth: int = 0) -> str:
    """The argument names and descriptions of an args schema (nested objects too)."""
    if not isinstance(schema, dict) or depth > 3:
        return ""
    out = []
    props = schema.get("properties")
    if isinstance(props, dict):
        for k, v in props.items():
            out.append(str(k))
            if isinstance(v, dict):
                if isinstance(v.get("description"), str):
                    out.append(v["description"])
                out.append(arg_text(v, depth + 1))
                out.append(arg_text(v.get("items"), depth + 1))
    return " ".join(o for o in out if o)


def tool_fields(tool: Any) -> dict[str, str]:
    """The text of each ranked field of a Tool."""
    fields = {"name": tool.name, "keywords": " ; ".join(tool.keywords),
              "description": tool.description, "args": arg_text(tool.schema),
              "prompt": tool.prompt}
    return {k: v[:FIELD_CHARS] for k, v in fields.items()}


def semantic_text(tool: Any, fields: Iterable[str] = ("name", "description", "keywords",
                                                      "argnames")) -> str:
    """What the semantic ranker embeds for a tool (SEMANTIC_FIELDS: its name's words,
    description, keywords and argument names; "args" for argument names and their
    descriptions, "prompt" for the prompt), at most SEMANTIC_CHARS."""
    parts = []
    for f in fields:
        if f == "name":
            parts.append(" ".join(_WORD.findall(tool.name)) + ".")
        elif f == "description":
            parts.append(tool.description[:SEMANTIC_CHARS])
        elif f == "keywords":
            parts.append("; ".join(tool.keywords)[:SEMANTIC_CHARS] + ".")
        elif f == "argnames":
            args = tool.schema.get("properties") if isinstance(tool.schema, dict) else None
            if isinstance(args, dict):
                parts.append(" ".join(" ".join(_WORD.findall(str(k)[:100]))
                                      for k in list(args)[:64]))
        elif f == "args":
            parts.append(arg_text(tool.schema)[:SEMANTIC_CHARS])
        elif f == "prompt":
            parts.append(tool.prompt[:SEMANTIC_CHARS])
    return " ".join(p for p in parts if p.strip(" .;"))[:SEMANTIC_CHARS]


class SearchIndex:
    """The live index of one registry's visible tools (see the module's header)."""

    def __init__(self, registry: Any, *, semantic: Any = None, use_numpy: bool = True,
                 fields: Iterable[tuple[str, float]] = FIELDS,
                 fusion: tuple[str, float, float] | None = None,
                 semantic_fields: Iterable[str] = SEMANTIC_FIELDS) -> None:
        """`semantic`: a semantic.Semantic (loaded on the first search), False for lexical
        only, None to make the default one."""
        self.registry = registry
        self.fields = tuple(fields)
        self.fusion = fusion                         # None: fusion.FUSION
        self.semantic_fields = tuple(semantic_fields)
        if semantic is None:
            from .semantic import Semantic
            semantic = Semantic()
        self.semantic = semantic or None
        self._np: Any = None
        self._want_numpy = use_numpy
        self._built = False
        self._dirty: set[str] = set()
        self._slot: dict[str, int] = {}
        self._tools: list[Any] = []                  # by slot; None: free
        self._free: list[int] = []
        self._post: dict[str, dict[int, float]] = {}
        self._terms: list[tuple[str, ...]] = []      # by slot: the terms it posted
        self._tfs: dict[float, float] = {}           # one float object per tf value
        self._dl: list[float] = []
        self._dl_total = 0.0
        self._arrays: dict[str, Any] = {}            # term -> (slots, weights, key), numpy
        self._dl_arr: Any = None                     # numpy: slot -> weighted length
        self._alive: Any = None                      # numpy: slot -> holds a tool
        self._vec: Any = None                        # slot -> embedding row
        self._vec_dirty: set[int] = set()
        self.noticed = False                         # the lexical-only notice was given
        hook = getattr(registry, "on_tool_change", None)
        if hook is not None:
            hook(self._moved)

    # --- following the registry ----------------------------------------------------

    def _moved(self, name: str) -> None:
        if self._built:
            self._dirty.add(name)

    def __len__(self) -> int:
        return len(self._slot)

    def pending(self) -> list[tuple[str, Any]]:
        """What moved since the last call (every tool, the first time), as (name, Tool or
        None: gone).  Cheap (dict look-ups): call it on the registry's thread, then give
        the list to `apply` anywhere (tree/searchfile.py: the search worker thread)."""
        if not self._built:
            self._built = True
            names: Iterable[str] = list(self.registry.tools)
        else:
            names, self._dirty = self._dirty, set()
        get = self.registry.get
        return [(name, get(name)) for name in names]

    def apply(self, moved: Iterable[tuple[str, Any]]) -> int:
        """Index the (name, Tool or None) pairs of `pending`: postings and embeddings; the
        number of names re-indexed.  Calls of apply and search must not overlap."""
        if self._np is None and self._want_numpy:
            try:
                import numpy
                self._np = numpy
            except ImportError:
                self._want_numpy = False
        n = 0
        for name, tool in moved:
            if n % 64 == 63:
                time.sleep(0)     # let the event loop's thread in (a long first build)
            slot = self._slot.get(name)
            if slot is not None and tool is not None and self._tools[slot] is tool:
                continue
            if slot is not None:
                self._remove(name, slot)
            if tool is not None:
                self._add(name, tool)
            n += 1
        self._embed_pending()
        return n

    def sync(self) -> int:
        """`apply(pending())`, on the caller's thread (the bench, the tests)."""
        return self.apply(self.pending())

    def _add(self, name: str, tool: Any) -> None:
        slot = self._free.pop() if self._free else len(self._tools)
        if slot == len(self._tools):
            self._tools.append(None)
            self._terms.append(())
            self._dl.append(0.0)
        tf: dict[str, float] = {}
        texts = tool_fields(tool)
        for field, weight in self.fields:
            for w in words(texts.get(field, "")):
                tf[w] = tf.get(w, 0.0) + weight
        dl = sum(tf.values())
        # one string object per term, shared by the postings' keys and every tool's terms
        # (not a copy per tool that holds it: 238,000 of them at 10,000 tools, 12 MiB)
        terms = tuple(map(sys.intern, tf))
        self._tools[slot], self._terms[slot], self._dl[slot] = tool, terms, dl
        self._dl_total += dl
        self._slot[name] = slot
        post, arrays, tfs = self._post, self._arrays, self._tfs
        for w, f in zip(terms, tf.values()):
            post.setdefault(w, {})[slot] = tfs.setdefault(f, f)
            arrays.pop(w, None)
        self._dl_arr = None
        self._vec_dirty.add(slot)

    def _remove(self, name: str, slot: int) -> None:
        del self._slot[name]
        post, arrays = self._post, self._arrays
        for w in self._terms[slot]:
            p = post[w]
            del p[slot]
            if not p:
                del post[w]
            arrays.pop(w, None)
        self._dl_total -= self._dl[slot]
        self._tools[slot], self._terms[slot], self._dl[slot] = None, (), 0.0
        self._free.append(slot)
        self._dl_arr = None
        self._vec_dirty.add(slot)

    # --- semantic -------------------------------------------------------------------

    def load_semantic(self) -> None:
        """Load the model (blocking: about a second; tree/searchfile.py runs it in a worker
        thread), then embed every indexed tool there too."""
        sem = self.semantic
        if sem is None or sem.tried:
            return
        sem.load()

    def _embed_pending(self) -> None:
        sem = self.semantic
        if sem is None or not sem.ready or not self._vec_dirty:
            return
        np = sem.np
        cap = len(self._tools)
        if self._vec is None or self._vec.shape[0] < cap:
            grown = np.zeros((max(cap, 64, 0 if self._vec is None else 2 * self._vec.shape[0]),
                              sem.dim), dtype=np.float32)
            if self._vec is not None:
                grown[:self._vec.shape[0]] = self._vec
            self._vec = grown
        slots = sorted(self._vec_dirty)
        self._vec_dirty = set()
        live = [s for s in slots if self._tools[s] is not None]
        dead = [s for s in slots if self._tools[s] is None]
        if dead:
            self._vec[dead] = 0.0
        for i in range(0, len(live), EMBED_BATCH):
            chunk = live[i:i + EMBED_BATCH]
            if i:
                time.sleep(0)
            self._vec[chunk] = sem.embed([semantic_text(self._tools[s], self.semantic_fields)
                                        for s in chunk])

    # --- searching ------------------------------------------------------------------

    def mode(self) -> str:
        """"hybrid" when the semantic ranker is in use, else "lexical"."""
        return "hybrid" if self.semantic is not None and self.semantic.ready else "lexical"

    def search(self, need: str, limit: int = LIMIT_DEFAULT,
               moved: Iterable[tuple[str, Any]] | None = None) -> list[tuple[str, float, str]]:
        """The best `limit` tools for `need`: (name, score, description), best first;
        `moved` (from `pending`) is applied first, else the index syncs itself."""
        if moved is None:
            self.sync()
        else:
            self.apply(moved)
        if not self._slot:
            return []
        terms = words(need)
        np = self._np
        if np is None:
            scores = self._fuse_py(self._lexical_py(terms))
            best = [(v, s) for s, v in scores.items()]
        else:
            fused = self._scores_np(np, terms, need)
            k = min(limit, len(fused))
            top = np.argpartition(-fused, k - 1)[:k] if k < len(fused) else np.arange(k)
            kth = float(fused[top].min())           # every tie of the last place, too
            cand = np.flatnonzero(fused >= kth) if kth > 0 else np.flatnonzero(fused > 0)
            best = list(zip(fused[cand].tolist(), cand.tolist()))
        best.sort(key=lambda vs: (-vs[0], self._name(vs[1])))
        return [(self._name(s), round(v, 3), self._tools[s].description)
                for v, s in best[:limit] if v > 0]

    def _name(self, slot: int) -> str:
        return str(self._tools[slot].name)

    def _idf(self, df: int) -> float:
        n = len(self._slot)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _avgdl(self) -> float:
        return (self._dl_total / len(self._slot)) or 1.0

    def _lexical_py(self, terms: list[str]) -> dict[int, float]:
        """BM25 per slot (only slots that share a word with the need), without numpy."""
        post, dl, avgdl = self._post, self._dl, self._avgdl()
        acc: dict[int, float] = {}
        for t in dict.fromkeys(terms):
            p = post.get(t)
            if not p:
                continue
            idf = self._idf(len(p))
            for s, f in p.items():
                norm = K1 * (1.0 - B + B * dl[s] / avgdl)
                acc[s] = acc.get(s, 0.0) + idf * f * (K1 + 1.0) / (f + norm)
        return acc

    @staticmethod
    def _fuse_py(lex: dict[int, float]) -> dict[int, float]:
        top = max(lex.values()) if lex else 0.0
        return {s: v / top for s, v in lex.items()} if top > 0 else {}

    def components(self, need: str) -> tuple[Any, Any, Any]:
        """(BM25 of every slot, cosines of every slot or None, the mask of slots holding a
        tool) for `need`, as numpy arrays: the rankers before fusion (the bench's view).
        Call after `sync`, with numpy."""
        np = self._np
        lex = self._lexical_np(np, words(need))
        return lex, self._semantic(need), self._alive

    def _lexical_np(self, np: Any, terms: list[str]) -> Any:
        """BM25 of every slot (0 for a free one).  Each term's BM25 weights are kept
        (per-term arrays), so a query adds a few arrays; they are made again only after
        a change."""
        cap = len(self._tools)
        if self._dl_arr is None:
            self._dl_arr = np.asarray(self._dl, dtype=np.float64)
            alive = self._alive = np.zeros(cap, dtype=bool)
            alive[list(self._slot.values())] = True
        acc = np.zeros(cap, dtype=np.float64)
        key = (len(self._slot), self._dl_total)
        for t in dict.fromkeys(terms):
            arr = self._arrays.get(t)
            if arr is None or arr[2] != key:
                p = self._post.get(t)
                if not p:
                    continue
                arr = self._arrays[t] = self._weights_np(np, p, key)
            acc[arr[0]] += arr[1]
        return acc

    def _scores_np(self, np: Any, terms: list[str], need: str) -> Any:
        """The fused score of every slot (0 for a free one), as one array (fusion.py)."""
        acc = self._lexical_np(np, terms)
        sem = self._semantic(need)
        if sem is None:
            top = float(acc.max())
            return acc / top if top > 0 else acc
        return fuse(np, acc, sem, None if self._free == [] else self._alive, self.fusion)

    def _weights_np(self, np: Any, p: dict[int, float], key: tuple[int, float]) -> Any:
        """(slots, BM25 weight of the term in each) for one term's postings, and the
        (tool count, total length) they hold for: recomputed when either moves."""
        ids = np.fromiter(p.keys(), np.int64, len(p))
        f = np.fromiter(p.values(), np.float64, len(p))
        norm = K1 * (1.0 - B + B * self._dl_arr[ids] / self._avgdl())
        return ids, self._idf(len(p)) * f * (K1 + 1.0) / (f + norm), key

    def _semantic(self, need: str) -> Any:
        """Cosines of every slot against the need (numpy array), or None."""
        sem = self.semantic
        if sem is None or not sem.ready or self._vec is None:
            return None
        q = sem.embed([need])[0]
        return self._vec[:len(self._tools)] @ q

    def notice(self) -> str | None:
        """The line that says, once per index, that search is lexical only; else None."""
        if self.noticed or self.mode() != "lexical":
            return None
        self.noticed = True
        why = self.semantic.error if self.semantic is not None else ""
        from ...dirs import bundled
        return f"{LEXICAL_NOTICE} ({bundled.install_hint('search')})" + (
            f": {why}" if why else "")


def answer_text(hits: list[tuple[str, float, str]], notice: str | None = None) -> bytes:
    """What a read of a search file returns: one `name<TAB>score<TAB>description` line per
    tool, best first; a `#` line before them when there is a notice."""
    from ..resolve import one_line
    lines = [notice + "\n"] if notice else []
    lines += [f"{n}\t{s:.3f}\t{one_line(d)}\n" for n, s, d in hits]
    return "".join(lines).encode()

