"""Read slurm.conf-style files the way Slurm does, so tests can check meaning rather than text.

Lines are `Key=Value` pairs; a line may hold several space-separated pairs, in which case the first
key names the record (NodeSet=..., PartitionName=..., NodeName=...). Keys are case-insensitive.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SlurmConf:
    params: dict[str, str] = field(default_factory=dict)  # single-pair lines, lower-cased keys
    records: list[dict[str, str]] = field(default_factory=list)  # multi-pair lines

    def get(self, key: str) -> str | None:
        return self.params.get(key.lower())

    def records_of(self, kind: str) -> list[dict[str, str]]:
        return [r for r in self.records if kind.lower() in r and next(iter(r)) == kind.lower()]


def parse(text: str) -> SlurmConf:
    conf = SlurmConf()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = []
        for token in line.split():
            if "=" not in token:
                raise ValueError(f"not a Key=Value token: {token!r} in line {raw!r}")
            key, value = token.split("=", 1)
            pairs.append((key.lower(), value))
        if len(pairs) == 1:
            key, value = pairs[0]
            if key in conf.params:
                raise ValueError(f"{key} set twice")
            conf.params[key] = value
        else:
            conf.records.append(dict(pairs))
    return conf


def parse_sshd(text: str) -> tuple[dict[str, list[str]], dict[str, dict[str, list[str]]]]:
    """sshd_config: (global options, {match criteria: options}); option names lower-cased."""
    global_opts: dict[str, list[str]] = {}
    matches: dict[str, dict[str, list[str]]] = {}
    current = global_opts
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(" ")
        if key.lower() == "match":
            current = matches.setdefault(rest.strip(), {})
            continue
        # sshd keeps the first value it sees for most options.
        current.setdefault(key.lower(), rest.split())
    return global_opts, matches
