"""config.pbtxt text: tensor blocks, strings, the instance group and parameters (what `gert repo init` writes)."""
from __future__ import annotations

from typing import Optional


def tensor_block(kind: str, entries: list) -> str:
    """``input [...]`` / ``output [...]`` of config entries (name, data_type, dims, optional reshape)."""
    items = []
    for e in entries:
        dims = ", ".join(str(d) for d in e["dims"])
        reshape = ""
        if "reshape" in e:
            reshape = f'\n    reshape: {{ shape: [ {", ".join(str(d) for d in e["reshape"]["shape"])} ] }}'
        items.append(f'  {{\n    name: "{e["name"]}"\n    data_type: {e["data_type"]}\n'
                     f'    dims: [ {dims} ]{reshape}\n  }}')
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n"


def pbtxt_string(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def instances_and_parameters(instances: int, parameters: Optional[dict]) -> str:
    text = f"instance_group [\n  {{\n    kind: KIND_CPU\n    count: {int(instances)}\n  }}\n]\n"
    for k, v in (parameters or {}).items():
        text += f"parameters {{\n  key: {pbtxt_string(k)}\n  value: {{ string_value: {pbtxt_string(v)} }}\n}}\n"
    return text
