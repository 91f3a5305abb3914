"""Protobuf message classes from a short declaration, for the few messages of an API we call.

A gRPC API such as the Kubernetes CRI is published as a large .proto; we declare only the
messages and fields we use (numbers and types as published; protobuf skips the rest of an
answer) and let the protobuf library build the classes, instead of vendoring generated code.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _T.TYPE_STRING, "bool": _T.TYPE_BOOL, "int32": _T.TYPE_INT32, "int64": _T.TYPE_INT64,
            "uint32": _T.TYPE_UINT32, "uint64": _T.TYPE_UINT64, "bytes": _T.TYPE_BYTES}


def build(package: str, file_name: str, messages: dict[str, list[tuple]],
          enums: dict[str, dict[str, int]] | None = None) -> dict[str, type]:
    """messages: name -> [(field, number, type)], type one of the scalars, a message or enum
    name of this file, `repeated T`, or `map<string,string>`. Returns name -> message class."""
    f = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    for name, values in (enums or {}).items():
        e = f.enum_type.add(name=name)
        for vname, number in values.items():
            e.value.add(name=vname, number=number)
    for name, fields in messages.items():
        m = f.message_type.add(name=name)
        for field_name, number, kind in fields:
            fd = m.field.add(name=field_name, number=number, label=_T.LABEL_OPTIONAL)
            if kind.startswith("repeated "):
                fd.label, kind = _T.LABEL_REPEATED, kind[len("repeated "):]
            if kind.startswith("map<"):
                entry = "".join(p.capitalize() for p in field_name.split("_")) + "Entry"
                nested = m.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.add(name="key", number=1, label=_T.LABEL_OPTIONAL, type=_T.TYPE_STRING)
                nested.field.add(name="value", number=2, label=_T.LABEL_OPTIONAL, type=_T.TYPE_STRING)
                fd.label, fd.type, fd.type_name = _T.LABEL_REPEATED, _T.TYPE_MESSAGE, f".{package}.{name}.{entry}"
            elif kind in _SCALARS:
                fd.type = _SCALARS[kind]
            elif kind in (enums or {}):
                fd.type, fd.type_name = _T.TYPE_ENUM, f".{package}.{kind}"
            else:
                fd.type, fd.type_name = _T.TYPE_MESSAGE, f".{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages}
