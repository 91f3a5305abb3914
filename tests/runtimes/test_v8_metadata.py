"""V8 metadata: the layout read from the `node` binary, and the names other V8 versions give fields."""

from __future__ import annotations

import shutil

import pytest

from hotstack.runtimes.v8.metadata import binary_layout, layout, read_v8dbg


def test_layout_of_node_on_this_machine():
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on this machine")
    found = binary_layout(node)
    assert found is not None
    assert (found.fp_function, found.fp_context) == (16, 8)       # x86-64 standard frame, every V8 since 7
    meta = read_v8dbg(node)
    assert found.function_shared == meta["v8dbg_class_JSFunction__shared__SharedFunctionInfo"]
    assert found.type_sfi == meta["v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"]


def test_field_type_suffixes_of_newer_versions():
    """V8 12 spells field types `Tagged_..._` and renamed SFI.script_or_debug_info to script."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on this machine")
    meta = read_v8dbg(node)
    renamed = {}
    for key, value in meta.items():
        if key == "v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object":
            key = "v8dbg_class_SharedFunctionInfo__name_or_scope_info__Tagged_NameOrScopeInfoT_"
        elif key.startswith("v8dbg_class_SharedFunctionInfo__script_or_debug_info__"):
            key = "v8dbg_class_SharedFunctionInfo__script__Tagged_HeapObject_"
        renamed[key] = value
    assert layout(renamed) == layout(meta)


def test_no_metadata_no_layout():
    assert layout({}) is None
    assert binary_layout("/bin/sh") is None
