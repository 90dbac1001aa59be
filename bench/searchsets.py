"""Public tool-retrieval sets for bench_search, converted to one form:
{"tools": [{"name", "description", "keywords", "args"}], "queries": [{"query", "relevant"}]}.

  APIBench (Gorilla, Apache-2.0): TorchHub, TensorFlow Hub, HuggingFace.  A tool is one
      API doc (`data/api/*_api.jsonl`), named by its `api_name`, described by its
      `description`, its `domain` and `functionality` as keywords, its `api_arguments` as
      args (names only); a query is an eval item's instruction (`data/apibench/*_eval.json`),
      relevant: the API whose `api_call` it names (docs with one `api_call` kept once).
  BFCL v4 (Berkeley Function Calling Leaderboard, Apache-2.0): simple_python, multiple,
      live_simple, live_multiple.  Every distinct function name of the four files is one
      tool (its first doc: description, and its parameters as args with their
      descriptions); a query is a question's user turns, relevant: the function its answer
      (possible_answer/) calls.  No keywords: BFCL's docs have none.
  API-Bank (Alibaba DAMO-ConvAI, api-bank/, Apache-2.0): every API class of `apis/` and
      `lv3_apis/` is one tool (its `description`, and its `input_parameters` as args with
      their descriptions; read from the source with ast, never run); a query is a dialogue
      of `lv1-lv2-samples/` (level 1 with the APIs' docs given, level 2 with a tool
      searcher): its first user turn, relevant: the APIs the dialogue calls, but for the
      helpers every dialogue calls on the way (GetUserToken, ToolSearcher).  Not in
      shared/: fetch it yourself (doc/search.md, Public sets) and name the folder with
      $TOOLSRV_APIBANK or --apibank (default ~/.cache/toolsrv-bench/api-bank).

The files are not in this repository (fetched data is kept apart, doc/search.md): they are
read from shared/data/{apibench,bfcl} in the nearest folder above the checkout that has
one (../shared beside the project) by default, or from the directories given
($TOOLSRV_APIBENCH, $TOOLSRV_BFCL, or bench_search's options).  Each loader returns None when its files are not there.
"""
from __future__ import annotations

import ast
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any



def _shared() -> Path:
    """../shared/data of the nearest folder above this checkout that has one."""
    for up in Path(__file__).resolve().parents[1:]:
        if (up / "shared" / "data").is_dir():
            return up / "shared" / "data"
    return Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED = _shared()
APIBENCH = (("torchhub", "torchhub_api.jsonl", "torchhub_eval.json"),
            ("tensorflowhub", "tensorflowhub_api.jsonl", "tensorflow_eval.json"),
            ("huggingface", "huggingface_api.jsonl", "huggingface_eval.json"))
BFCL = ("simple_python", "multiple", "live_simple", "live_multiple")
NEED_BYTES = 4096            # what tools/search takes of one need
_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def _call_key(call: str) -> str:
    return " ".join(str(call).split())


def apibench(root: Path, apis: str, evals: str) -> dict[str, Any] | None:
    """One APIBench set as {"tools": [...], "queries": [{"query", "relevant"}]}, or None."""
    api_path, eval_path = root / "data" / "api" / apis, root / "data" / "apibench" / evals
    if not api_path.exists() or not eval_path.exists():
        return None
    tools: list[dict[str, Any]] = []
    by_call: dict[str, str] = {}
    used: set[str] = set()
    for line in api_path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        key = _call_key(d.get("api_call", ""))
        if not key or key in by_call:
            continue
        base = _BAD.sub("_", str(d.get("api_name") or "api")).strip("._-")[:100] or "api"
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}_{i}"
        used.add(name)
        by_call[key] = name
        args = d.get("api_arguments")
        names = list(args) if isinstance(args, (dict, list)) else []
        props = {_BAD.sub("_", str(a))[:60] or "arg": {"type": "string"} for a in names
                 if isinstance(a, str)}
        tools.append({"name": name, "description": str(d.get("description") or ""),
                      "keywords": [str(d.get("domain") or ""), str(d.get("functionality") or "")],
                      "args": {"type": "object", "properties": props}})
    desc = {t["name"]: " ".join(t["description"].split()) for t in tools}
    same: dict[str, list[str]] = {}
    for n, text in desc.items():
        same.setdefault(text, []).append(n)
    queries = []
    for line in eval_path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        target = by_call.get(_call_key(d.get("api_call", "")))
        m = re.search(r"(?:###Instruction:|'Instruction':)(.*?)(?:###Output|, 'Output'|$)",
                      d.get("code", ""), re.S)
        if target and m and m.group(1).strip():
            queries.append({"query": " ".join(m.group(1).split()), "relevant": [target],
                            "siblings": same[desc[target]]})
    return {"tools": tools, "queries": queries}


def _schema(params: Any, depth: int = 0) -> dict[str, Any]:
    """A BFCL `parameters` ("type": "dict", Python type names) as a JSON Schema object
    that keeps each argument's description."""
    props: dict[str, Any] = {}
    if isinstance(params, dict) and isinstance(params.get("properties"), dict):
        for k, v in params["properties"].items():
            p: dict[str, Any] = {}
            if isinstance(v, dict):
                if isinstance(v.get("description"), str):
                    p["description"] = v["description"]
                if depth < 2 and isinstance(v.get("properties"), dict):
                    p.update(_schema(v, depth + 1))
            props[_BAD.sub("_", str(k))[:60] or "arg"] = p
    return {"type": "object", "properties": props}


def bfcl(root: Path) -> dict[str, Any] | None:
    """BFCL v4's four files as one pool of tools and their questions, or None."""
    if not all((root / f"BFCL_v4_{s}.json").exists() for s in BFCL):
        return None
    tools: dict[str, dict[str, Any]] = {}
    queries = []
    for s in BFCL:
        answers = {}
        for line in (root / "possible_answer" / f"BFCL_v4_{s}.json").read_text().splitlines():
            if line.strip():
                a = json.loads(line)
                answers[a["id"]] = [next(iter(g)) for g in a["ground_truth"]]
        for line in (root / f"BFCL_v4_{s}.json").read_text().splitlines():
            if not line.strip():
                continue
            q = json.loads(line)
            for f in q["function"]:
                name = _BAD.sub("_", f["name"]).strip("_")[:100]
                tools.setdefault(name, {"name": name,
                                        "description": str(f.get("description") or ""),
                                        "args": _schema(f.get("parameters"))})
            turns = q["question"][0] if q["question"] else []
            need = " ".join(t["content"] for t in turns if t.get("role") == "user")
            need = " ".join(need.split()).encode()[:NEED_BYTES].decode(errors="ignore")
            rel = sorted({_BAD.sub("_", n).strip("_")[:100] for n in answers[q["id"]]})
            if need and rel:
                queries.append({"query": need, "relevant": rel, "part": s})
    return {"tools": list(tools.values()), "queries": queries}


APIBANK = Path(os.environ.get("TOOLSRV_APIBANK")
               or Path.home() / ".cache" / "toolsrv-bench" / "api-bank")
APIBANK_HELPERS = {"GetUserToken", "ToolSearcher"}   # called on the way, not the need


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _apibank_tools(folder: Path) -> dict[str, dict[str, Any]]:
    """API-Bank's API classes in `folder`, from their source (class attributes
    description and input_parameters), without running any of it."""
    tools: dict[str, dict[str, Any]] = {}
    for f in sorted(folder.glob("*.py")):
        for node in ast.parse(f.read_text(errors="replace")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            attrs = {t.id: _literal(a.value) for a in node.body if isinstance(a, ast.Assign)
                     for t in a.targets if isinstance(t, ast.Name)}
            if not isinstance(attrs.get("description"), str) or node.name == "API":
                continue
            props = {}
            for k, v in (attrs.get("input_parameters") or {}).items():
                d = v.get("description") if isinstance(v, dict) else None
                props[_BAD.sub("_", str(k))[:60] or "arg"] = \
                    {"description": d} if isinstance(d, str) else {}
            tools.setdefault(node.name, {"name": node.name, "description": attrs["description"],
                                         "args": {"type": "object", "properties": props}})
    return tools


def apibank(root: Path) -> dict[str, Any] | None:
    """API-Bank's APIs as a pool of tools and its level-1/2 dialogues as needs, or None."""
    samples = root / "lv1-lv2-samples"
    if not (root / "apis").is_dir() or not samples.is_dir():
        return None
    tools = _apibank_tools(root / "apis")
    for name, t in _apibank_tools(root / "lv3_apis").items():
        tools.setdefault(name, t)
    queries = []
    for f in sorted(samples.glob("*/*.jsonl")):
        turns = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        need = next((t.get("text", "") for t in turns if t.get("role") == "User"), "")
        need = " ".join(need.split()).encode()[:NEED_BYTES].decode(errors="ignore")
        rel = sorted({t["api_name"] for t in turns if t.get("role") == "API"
                      and t.get("api_name") in tools} - APIBANK_HELPERS)
        if need and rel:
            queries.append({"query": need, "relevant": rel, "part": f.parent.name})
    tools.pop("ToolSearcher", None)     # the searcher itself is what is being measured
    return {"tools": list(tools.values()), "queries": queries}


def public_sets(apibench_dir: Path | None, bfcl_dir: Path | None,
                apibank_dir: Path | None = APIBANK
                ) -> list[tuple[str, dict[str, Any] | None]]:
    """(label, set or None: its files are missing) for every public set."""
    out: list[tuple[str, dict[str, Any] | None]] = []
    for label, apis, evals in APIBENCH:
        out.append((f"APIBench {label}",
                    apibench(apibench_dir, apis, evals) if apibench_dir else None))
    out.append(("BFCL v4", bfcl(bfcl_dir) if bfcl_dir else None))
    out.append(("API-Bank", apibank(apibank_dir) if apibank_dir else None))
    return out


def write_tools(tools: list[dict[str, Any]], fields: str = "all") -> str:
    """A tools directory of `.meta` files (cmd `cat`) for the set; `fields` "all" or
    "plain" (name + description only, the baseline's text)."""
    d = tempfile.mkdtemp(prefix="bench-search.", dir="/tmp")
    for t in tools:
        meta: dict[str, Any] = {"description": t["description"], "cmd": "cat"}
        if fields == "all":
            for k in ("keywords", "args", "prompt"):
                if t.get(k):
                    meta[k] = t[k]
        Path(d, t["name"] + ".meta").write_text(json.dumps(meta))
    return d
