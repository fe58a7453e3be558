"""The committed generated code matches proto/leasehold/v1/leasehold.proto:
every service method, message, field (name and number) and enum value.
When this fails, run clients/python/scripts/generate.sh."""

from __future__ import annotations

import re

from leasehold.v1 import leasehold_pb2 as pb

from .conftest import REPO


def _parse(path):
    """(rpcs by service, fields by message, values by enum) of a .proto file."""
    text = re.sub(r"//[^\n]*", "", path.read_text())
    rpcs: dict[str, set] = {}
    fields: dict[str, dict] = {}
    values: dict[str, dict] = {}
    stack: list[tuple[str, str]] = []
    for tok in re.finditer(r"(service|message|enum|oneof)\s+(\w+)\s*\{|\{|\}|([^{};]+);", text):
        kind, name, stmt = tok.group(1), tok.group(2), tok.group(3)
        if kind:
            stack.append((kind, name))
            if kind == "message":
                fields.setdefault(name, {})
        elif tok.group(0) == "{":
            stack.append(("block", ""))
        elif tok.group(0) == "}":
            stack.pop()
        elif stack:
            outer = [s for s in stack if s[0] in ("service", "message", "enum")][-1]
            stmt = stmt.strip()
            if outer[0] == "service" and (m := re.match(r"rpc\s+(\w+)\s*\(", stmt)):
                rpcs.setdefault(outer[1], set()).add(m.group(1))
            elif outer[0] == "message" and (m := re.match(r"(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*(\d+)", stmt)):
                fields.setdefault(outer[1], {})[m.group(1)] = int(m.group(2))
            elif outer[0] == "enum" and (m := re.match(r"(\w+)\s*=\s*(\d+)", stmt)):
                values.setdefault(outer[1], {})[m.group(1)] = int(m.group(2))
    return rpcs, fields, values


def test_the_generated_code_is_up_to_date():
    rpcs, fields, values = _parse(REPO / "proto" / "leasehold" / "v1" / "leasehold.proto")
    d = pb.DESCRIPTOR
    assert rpcs and fields and values
    assert set(d.services_by_name) == set(rpcs)
    for svc, names in rpcs.items():
        assert set(d.services_by_name[svc].methods_by_name) == names, svc
    assert set(d.message_types_by_name) == set(fields)
    for msg, want in fields.items():
        got = {f.name: f.number for f in d.message_types_by_name[msg].fields}
        assert got == want, msg
    for enum, want in values.items():
        assert {v.name: v.number for v in d.enum_types_by_name[enum].values} == want, enum
