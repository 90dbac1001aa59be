"""Command resolution (what runs when a tool is called), and the resolved `Tool`.

Theory of operation.  The spec's order, first hit wins:
  1. `beside`       an executable named like the tool in the `.meta`'s own directory;
  2. `cmd`, when the (variant-applied) definition sets one:
       `cmd-absolute` an absolute path (one word) is executed directly,
       `cmd-path`     a bare name (one word, no '/') is looked up on $PATH,
       `cmd-shell`    anything else is a shell command: `/bin/sh -c CMD`;
  3. `path`         the tool's own name looked up on $PATH.
A `cmd` that is set decides: an absolute path that is not executable, or a bare name not
on $PATH, leaves the tool without a command rather than falling through to rule 3 (which
would run something the author did not name).  Shell commands are not inspected; they
always resolve.  A tool without a command is not served; its reason says what was tried.

"One word" means only characters no shell treats specially (letters, digits, `._+,:@%-`
and, for paths, `/`), so `rg` and `/usr/bin/rg` run directly while `rg --json`,
`./tool`, `~/bin/x` and `a=b` go through the shell, which gives them their usual meaning.
"""

from __future__ import annotations

import json
import os
import re
from functools import cached_property
from typing import Any

from .metafile import HINTS, default_args, validator_class
from .schemaref import uses_regex, validator as schema_validator
from ..errors import printable
from ..record import Frozen, setfield
from .variants import Host
from . import warmstart

SHELL = "/bin/sh"
RULES = ("beside", "cmd-absolute", "cmd-path", "cmd-shell", "path")
_BARE = re.compile(r"[A-Za-z0-9._+,:@%-]+", re.ASCII)
_ABSOLUTE = re.compile(r"/[A-Za-z0-9._+,:@%/-]*", re.ASCII)


class Command(Frozen):
    """A resolved command: `kind` "exec" (argv run directly) or "shell" (argv is
    `/bin/sh -c CMD`), and the resolution `rule` that chose it (one of RULES)."""
    FIELDS = ("kind", "argv", "rule")
    kind: str
    argv: tuple[str, ...]
    rule: str

    def __init__(self, kind: str, argv: tuple[str, ...], rule: str) -> None:
        setfield(self, "kind", kind)
        setfield(self, "argv", argv)
        setfield(self, "rule", rule)

    def to_json(self) -> dict[str, Any]:
        """The form shown in tools/<tool>/meta."""
        out: dict[str, Any] = {"rule": self.rule, "kind": self.kind, "argv": list(self.argv)}
        if self.kind == "shell":
            out["shell"] = self.argv[2]
        return out


def cmd_form(cmd: str) -> str:
    """How a `cmd` value is taken: "absolute", "bare" or "shell"."""
    if _BARE.fullmatch(cmd):
        return "bare"
    return "absolute" if _ABSOLUTE.fullmatch(cmd) else "shell"


def resolve(name: str, tool_dir: str, cmd: str | None, host: Host, beside: bool = True
            ) -> tuple[Command | None, str]:
    """Resolve tool `name` whose `.meta` is in `tool_dir` (and `cmd`, variant applied):
    (the command, "") or (None, the reason).  `beside=False` says the caller knows no file
    `tool_dir/name` exists.  Probes of $PATH and of absolute paths are recorded in
    `host.asked`; the executable beside the `.meta` is not (its directory is watched)."""
    if beside and host.is_exec(path := os.path.join(tool_dir, name), record=False):
        return Command("exec", (path,), "beside"), ""
    if cmd is not None:
        form = cmd_form(cmd)
        if form == "shell":
            return Command("shell", (SHELL, "-c", cmd), "cmd-shell"), ""
        if form == "absolute":
            if host.is_exec(cmd):
                return Command("exec", (cmd,), "cmd-absolute"), ""
            return None, f"no command: cmd {cmd} is not an executable file"
        found = host.which(cmd)
        if found is not None:
            return Command("exec", (found,), "cmd-path"), ""
        return None, f'no command: cmd "{cmd}" not found on $PATH'
    found = host.which(name)
    if found is not None:
        return Command("exec", (found,), "path"), ""
    if beside and os.path.isfile(path := os.path.join(tool_dir, name)):
        return None, (f"no command: {name} is beside the .meta but not executable: "
                      f"chmod +x {path}")
    return None, (f"no command: no executable {name} beside the .meta, no cmd, "
                  f"and no {name} on $PATH")


def one_line(s: str) -> str:
    """`s` as one line of a listing (tools/index, search, errors): line breaks and tabs
    turned into spaces, other control characters written out (errors.printable)."""
    return printable(s.replace("\r", " ").replace("\n", " ").replace("\t", " "))


class Tool(Frozen):
    """One visible tool, variant applied and command resolved.  Treat as immutable."""
    FIELDS = ("name", "file", "dir", "description", "prompt", "keywords", "schema", "tier",
              "read_only", "scope", "output_format", "resets_counter", "extra", "command",
              "variant", "cmd", "resident", "hints", "secrets")
    name: str
    file: str
    dir: str
    description: str
    prompt: str
    keywords: tuple[str, ...]
    schema: dict[str, Any]
    tier: str
    read_only: bool
    scope: str | None
    output_format: str | None
    resets_counter: bool
    extra: dict[str, Any]
    command: Command
    variant: int | None
    cmd: str | None
    resident: dict[str, Any] | None
    hints: dict[str, Any]
    secrets: tuple[str, ...]

    def __init__(self, name: str, file: str, dir: str, description: str, prompt: str,
                 keywords: tuple[str, ...], schema: dict[str, Any], tier: str,
                 read_only: bool, scope: str | None, output_format: str | None,
                 resets_counter: bool, extra: dict[str, Any], command: Command,
                 variant: int | None, cmd: str | None = None,
                 resident: dict[str, Any] | None = None,
                 hints: dict[str, Any] | None = None,
                 secrets: tuple[str, ...] = ()) -> None:
        self.__dict__.update(           # what make_tool does too
            name=name,
            file=file,                  # the .meta path
            dir=dir,                    # its directory ({TOOLS})
            description=description, prompt=prompt, keywords=keywords,
            schema=schema,              # `args`, or an object with no required properties
            tier=tier, read_only=read_only, scope=scope, output_format=output_format,
            resets_counter=resets_counter,
            extra=extra,                # unknown fields, kept
            command=command,
            variant=variant,            # index of the variant applied, None without variants
            cmd=cmd,                    # the `cmd` field as written (variant applied)
            resident=resident,          # {"protocol", "idle", "tool"}, or None: a run per call
            hints=hints or {},          # title, destructive, idempotent, outputSchema
            secrets=secrets)            # names of the values its runs get (run/secrets.py)

    def meta_json(self) -> dict[str, Any]:
        """The resolved definition served as tools/<tool>/meta."""
        out: dict[str, Any] = {
            "name": self.name, "file": self.file, "dir": self.dir,
            "description": self.description, "prompt": self.prompt,
            "keywords": list(self.keywords), "args": self.schema, "tier": self.tier,
            "readOnly": self.read_only, "resetsCounter": self.resets_counter}
        for k, v in (("scope", self.scope), ("outputFormat", self.output_format),
                     ("cmd", self.cmd), ("variant", self.variant),
                     ("resident", self.resident)):
            if v is not None:
                out[k] = v
        out.update(self.hints)
        if self.secrets:               # their names: the values are never served
            out["secrets"] = list(self.secrets)
        out["command"] = self.command.to_json()
        out["start"] = start = warmstart.describe(list(self.command.argv),
                                                  self.extra.get("warm"))
        if self.resident is not None:  # its calls go to the agent's resident process
            out["start"] = {"resident": self.resident["protocol"]}
            if self.resident["protocol"] == "python":  # the calls it cannot serve, as a run
                out["start"]["otherwise"] = start
        if self.extra:
            out["extra"] = self.extra
        return out

    @cached_property
    def meta_text(self) -> str:
        """tools/<tool>/meta: meta_json() as pretty JSON."""
        return _pretty(self.meta_json())

    @cached_property
    def schema_text(self) -> str:
        """tools/<tool>/schema: the args schema as pretty JSON."""
        return _pretty(self.schema)

    @cached_property
    def prompt_text(self) -> str:
        """tools/<tool>/prompt: the prompt, newline-terminated when not empty."""
        return self.prompt if not self.prompt or self.prompt.endswith("\n") else self.prompt + "\n"

    @cached_property
    def index_line(self) -> str:
        """This tool's line of tools/index."""
        return f"{self.name}\t{self.tier}\t{one_line(self.description)}\n"

    @cached_property
    def validator(self) -> Any:
        """A jsonschema validator for call arguments (the schema's draft; formats are
        annotations, as the drafts specify; refs resolve only inside the schema), built
        on first use."""
        return schema_validator(self.schema, validator_class(self.schema))

    @cached_property
    def runs_regex(self) -> bool:
        """Whether checking call args can run a regex (schemaref.uses_regex): such a check
        may spend its whole budget, so the server makes it off its loop."""
        return uses_regex(self.schema)


def _pretty(v: Any) -> str:
    return json.dumps(v, indent=2, ensure_ascii=False) + "\n"


def make_tool(name: str, dir: str, file: str, fields: dict[str, Any],
              extra: dict[str, Any], command: Command, variant: int | None) -> Tool:
    """The Tool for checked, variant-applied `fields` with defaults filled in."""
    # What Tool(**values) does, without binding sixteen keyword arguments first: that
    # counts in a 10,000-tool load.
    tool = object.__new__(Tool)
    tool.__dict__.update(
        name=name, file=file, dir=dir,
        description=fields.get("description", ""), prompt=fields.get("prompt", ""),
        keywords=fields.get("keywords", ()),
        schema=fields["args"] if "args" in fields else default_args(),
        tier=fields.get("tier", "hot"), read_only=fields.get("readOnly", False),
        scope=fields.get("scope"), output_format=fields.get("outputFormat"),
        resets_counter=fields.get("resetsCounter", False), extra=extra,
        command=command, variant=variant, cmd=fields.get("cmd"),
        resident=_resident(fields.get("resident"), name),
        hints={k: fields[k] for k in HINTS if k in fields},
        secrets=fields.get("secrets", ()))
    return tool


def _resident(r: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The resident settings with `tool` defaulting to the .meta's name."""
    if r is None or r.get("tool"):
        return r
    return {**r, "tool": name}
