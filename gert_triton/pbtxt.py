"""config.pbtxt text: the one writer of every config gert writes (`gert repo init`, its --pre / --post step models
and ensemble).

A config is given as a dict in Triton's JSON form (what ``pb_utils.ModelConfig.as_dict`` shows: proto field names,
enums by name, maps as dicts). ``write_config`` checks it against Triton's own schema (``model_config.proto``, as
tritonclient ships it), renders it with every string escaped as protobuf's text format requires (C escapes: a name
with a quote, a newline or a brace stays one string), then parses the text back and compares it with the config
meant: text that would read back as anything else (an injected field, a lost one) is refused before a file is
written. Strings Triton cannot take (a NUL: Triton's C API ends a name there) are refused, naming the field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.text_encoding import CEscape

from gert.errors import GertError

INDENT = "  "


def _schema():
    """Triton's ModelConfig message class (tritonclient's copy of model_config.proto)."""
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as e:  # pragma: no cover - tritonclient is part of gert's triton extra
        raise GertError(
            "writing config.pbtxt checks it against Triton's model_config.proto, which tritonclient "
            "ships: pip install 'gert[triton]' (or tritonclient[grpc])"
        ) from e
    return model_config_pb2.ModelConfig


def quote(value: str) -> str:
    """``value`` as a protobuf text-format string literal (quotes, backslashes and control characters escaped;
    other unicode kept as UTF-8, which protobuf's parser reads back as the same string)."""
    return '"' + CEscape(str(value), as_utf8=True) + '"'


def _check_strings(value: Any, path: str, where: str) -> None:
    """Refuse strings Triton cannot take: a NUL ends a name in Triton's C API (a tensor 'a\\0b' would be 'a')."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, f"{path} key", where)
            _check_strings(v, f"{path}.{k}" if path else str(k), where)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_strings(v, f"{path}[{i}]", where)
    elif isinstance(value, str) and "\x00" in value:
        raise GertError(
            f"config.pbtxt of {where}: {path} {value!r} contains the character '\\x00' (U+0000), which "
            "Triton cannot take (its C API ends a name there); rename it"
        )


def _scalar(field: FieldDescriptor, value: Any) -> str:
    if field.type == FieldDescriptor.TYPE_STRING:
        return quote(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return '"' + CEscape(bytes(value), as_utf8=False) + '"'
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        name = enum.values_by_number[value].name if isinstance(value, int) else str(value)
        if name not in enum.values_by_name:
            raise GertError(f"config.pbtxt: {field.name} {value!r} is not one of {sorted(enum.values_by_name)}")
        return name
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return repr(float(value))
    return str(int(value))  # integer types (JSON form writes 64-bit ones as strings)


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _repeated(field: FieldDescriptor) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf >= 5.28 (``label`` is deprecated there)
    if is_repeated is not None:
        return bool(is_repeated() if callable(is_repeated) else is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _inline(d: dict, desc) -> str:
    """A message on one line: ``{ a: 1 b: [ 2, 3 ] }``."""
    parts = []
    for key, value in d.items():
        f = desc.fields_by_name[key]
        if _is_map(f):
            parts += [
                f"{key} {{ key: {_scalar(f.message_type.fields_by_name['key'], k)} value: "
                f"{_map_value(f.message_type.fields_by_name['value'], v)} }}"
                for k, v in value.items()
            ]
        elif _repeated(f) and f.message_type is not None:
            parts.append(f"{key}: [ " + ", ".join(_inline(v, f.message_type) for v in value) + " ]")
        elif _repeated(f):
            parts.append(f"{key}: [ " + ", ".join(_scalar(f, v) for v in value) + (" ]" if value else "]"))
        elif f.message_type is not None:
            parts.append(f"{key}: {_inline(value, f.message_type)}")
        else:
            parts.append(f"{key}: {_scalar(f, value)}")
    return "{ " + " ".join(parts) + (" }" if parts else "}")


def _map_value(field: FieldDescriptor, value: Any) -> str:
    return _inline(value, field.message_type) if field.message_type is not None else _scalar(field, value)


def _block(d: dict, desc, depth: int) -> list:
    """A message's fields, one a line (nested messages in blocks; a message inside a list item or map on one
    line), in the order of ``d``."""
    pad = INDENT * depth
    lines = []
    for key, value in d.items():
        f = desc.fields_by_name[key]
        if _is_map(f):
            kf, vf = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            for k, v in value.items():
                if vf.message_type is None:
                    lines.append(f"{pad}{key} {{ key: {_scalar(kf, k)} value: {_scalar(vf, v)} }}")
                else:
                    lines += [
                        f"{pad}{key} {{",
                        f"{pad}{INDENT}key: {_scalar(kf, k)}",
                        f"{pad}{INDENT}value: {_inline(v, vf.message_type)}",
                        f"{pad}}}",
                    ]
        elif _repeated(f) and f.message_type is not None:
            items = []
            for v in value:
                items.append(
                    "\n".join([f"{pad}{INDENT}{{"] + _block(v, f.message_type, depth + 2) + [f"{pad}{INDENT}}}"])
                )
            lines += [f"{pad}{key} ["] + ([",\n".join(items)] if items else []) + [f"{pad}]"]
        elif _repeated(f):
            lines.append(f"{pad}{key}: [ " + ", ".join(_scalar(f, v) for v in value) + (" ]" if value else "]"))
        elif f.message_type is not None:
            if depth >= 2:
                lines.append(f"{pad}{key}: {_inline(value, f.message_type)}")
            else:
                lines += [f"{pad}{key} {{"] + _block(value, f.message_type, depth + 1) + [f"{pad}}}"]
        else:
            lines.append(f"{pad}{key}: {_scalar(f, value)}")
    return lines


def write_config(config: dict) -> str:
    """The config.pbtxt text of ``config`` (Triton's JSON form), checked: the text parses back (protobuf's own
    text-format parser, Triton's schema) to exactly the config meant, else GertError before anything is written."""
    where = repr(config.get("name", "?"))
    _check_strings(config, "", where)
    cls = _schema()
    try:
        meant = json_format.ParseDict(config, cls())
    except json_format.ParseError as e:
        raise GertError(f"config.pbtxt of {where}: not a Triton model config: {e}") from None
    text = "\n".join(_block(config, cls.DESCRIPTOR, 0)) + "\n"
    try:
        back = text_format.Parse(text, cls())
    except text_format.ParseError as e:
        raise GertError(f"config.pbtxt of {where} does not parse back ({e}); refusing to write it") from None
    if back != meant:
        raise GertError(
            f"config.pbtxt of {where} reads back as another config; refusing to write it:\n"
            f"meant:\n{text_format.MessageToString(meant, as_utf8=True)}\n"
            f"read back:\n{text_format.MessageToString(back, as_utf8=True)}"
        )
    return text


def block_dict(text: str) -> dict:
    """A config fragment gert's own code writes as text (sequences.sequence_block: numbers and keywords, no names)
    as the JSON-form dict ``write_config`` takes."""
    msg = text_format.Parse(text, _schema()())
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def parameters(values: dict) -> dict:
    """Config ``parameters`` (JSON form) of {key: string value}."""
    return {str(k): {"string_value": str(v)} for k, v in (values or {}).items()}


def instance_group(count: int) -> list:
    """One CPU instance group of ``count`` instances."""
    return [{"kind": "KIND_CPU", "count": int(count)}]
