"""The server command a search fills in: ``--server-cmd "CMD with {knob} placeholders"`` and
``--search knob=v1,v2,...`` (repeatable; candidates are every combination).

The command is split like a shell would (shlex), then each word is filled in, so a value never
needs quoting and no shell runs. ``{port}`` is required (each candidate listens on a free port
on 127.0.0.1) and ``{host}`` becomes 127.0.0.1. A placeholder standing alone as a word may take
a flag as its value (``{prefix}`` with ``prefix=--enable-prefix-caching,--no-enable-prefix-
caching``), and an empty value drops that word.

Everything is checked before anything starts: a placeholder with no values, a knob with no
placeholder, a duplicated value, and, for the runtimes server_flags.py knows, every flag a knob
sets.
"""

from __future__ import annotations

import itertools
import re
import shlex
import string

from pydantic import BaseModel, ConfigDict

from infertune.errors import ConfigError
from infertune.optimize.server_tune.server_flags import Runtime, check_flag, detect

BUILTIN = ("port", "host")
HOST = "127.0.0.1"
KNOB_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
MAX_CANDIDATES = 64


class Candidate(BaseModel):
    """One configuration: knob -> value, and its id (``max_num_seqs=4,prefix=on``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    knobs: dict[str, str]


def parse_search(items: list[str]) -> dict[str, list[str]]:
    """``["max_num_seqs=1,4,16"]`` -> {"max_num_seqs": ["1", "4", "16"]}."""
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not KNOB_NAME.match(name):
            raise ConfigError(f"--search {item!r} is not understood; write KNOB=V1,V2,... "
                              "such as max_num_seqs=1,4,16 (KNOB is a {placeholder} of "
                              "--server-cmd)")
        if name in BUILTIN:
            raise ConfigError(f"--search {name}: {{{name}}} is filled in by infertune; "
                              "search another knob")
        if name in out:
            raise ConfigError(f"--search {name} is given twice; list all its values in one")
        values = [v.strip() for v in raw.split(",")]
        if len(set(values)) < len(values):
            raise ConfigError(f"--search {item!r} repeats a value; list each value once")
        out[name] = values
    return out


class ServerCommand:
    """A checked command template and the candidates of a search over its knobs."""

    def __init__(self, template: str, search: dict[str, list[str]], *,
                 knob_check: bool = True) -> None:
        try:
            self.words = shlex.split(template)
        except ValueError as exc:
            raise ConfigError(f"--server-cmd cannot be split into words ({exc}); check its "
                              "quotes") from exc
        if not self.words:
            raise ConfigError("--server-cmd is empty; give the command that starts the server")
        self.template, self.search = template, search
        fields = [_fields(w) for w in self.words]
        used = {f for fs in fields for f in fs}
        if "port" not in used:
            raise ConfigError("--server-cmd has no {port} placeholder; add e.g. --port {port} "
                              "so that each candidate listens on a free port of 127.0.0.1")
        missing = sorted(used - set(BUILTIN) - set(search))
        if missing:
            raise ConfigError(f"--server-cmd uses {{{missing[0]}}} but --search gives it no "
                              f"values; add --search {missing[0]}=V1,V2")
        unused = sorted(set(search) - used)
        if unused:
            raise ConfigError(f"--search {unused[0]} has no {{{unused[0]}}} placeholder in "
                              "--server-cmd; add it where the flag's value goes")
        self.runtime: Runtime | None = detect(self.words)
        if knob_check and self.runtime is not None:
            self._check_flags(self.runtime, fields)

    def _check_flags(self, runtime: Runtime, fields: list[list[str]]) -> None:
        for i, (word, names) in enumerate(zip(self.words, fields, strict=True)):
            knobs = [n for n in names if n not in BUILTIN]
            if not knobs:
                continue
            if word.startswith("-") and "=" in word:  # --flag={knob}
                check_flag(runtime, word.split("=", 1)[0])
            elif word == f"{{{knobs[0]}}}" and any(v.startswith("-")
                                                    for v in self.search[knobs[0]]):
                for value in self.search[knobs[0]]:  # a whole word that is a flag
                    if value:
                        check_flag(runtime, value.split("=", 1)[0])
            elif i > 0 and self.words[i - 1].startswith("-"):  # --flag {knob}
                check_flag(runtime, self.words[i - 1])

    def candidates(self) -> list[Candidate]:
        names = list(self.search)
        combos = list(itertools.product(*(self.search[n] for n in names)))
        if len(combos) > MAX_CANDIDATES:
            raise ConfigError(f"--search makes {len(combos)} candidates; at most "
                              f"{MAX_CANDIDATES} can be measured in one run: search fewer "
                              "values")
        return [Candidate(id=",".join(f"{n}={v}" for n, v in zip(names, combo, strict=True)),
                          knobs=dict(zip(names, combo, strict=True))) for combo in combos]

    def argv(self, candidate: Candidate, port: int | str) -> list[str]:
        values = {**candidate.knobs, "port": str(port), "host": HOST}
        out = []
        for word in self.words:
            names = _fields(word)
            filled = word.format(**values) if names else word
            if filled or not names:  # an empty value drops its word
                out.append(filled)
        return out

    def line(self, candidate: Candidate, port: int | None = None) -> str:
        """The candidate's command line as a user would type it ({port} kept when None)."""
        if port is not None:
            return shlex.join(self.argv(candidate, port))
        # shlex quotes the braces; the placeholder reads better bare
        return shlex.join(self.argv(candidate, "{port}")).replace("'{port}'", "{port}")


def _fields(word: str) -> list[str]:
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"--server-cmd word {word!r}: {exc}; write placeholders as {{knob}} "
                          "and a literal brace as {{ or }}") from exc
    for name in names:
        if not KNOB_NAME.match(name):
            raise ConfigError(f"--server-cmd placeholder {{{name}}} is not a plain name; "
                              "write it like {max_num_seqs}")
    return names
